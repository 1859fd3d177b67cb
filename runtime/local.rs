//! Goroutine-local storage: `goroutine_local!` and [`LocalKey`].
//!
//! # Representation
//!
//! Each goroutine that has touched a goroutine-local owns a [`Locals`]
//! table, boxed and hung on its G (`G.locals`, null until first use): a
//! vector of (key, value) pairs sorted by key, where the key is the address
//! of the `static` the macro declares (unique per declaration) and the value
//! a `Box<dyn Any>` holding that goroutine's `T`. Only the goroutine itself
//! touches its table, so no synchronisation is needed; values are boxed so
//! a `&T` stays valid while the table grows (a `with` closure may
//! initialise other locals).
//!
//! # Lifetime
//!
//! A value is created from the key's initialiser on the goroutine's first
//! `with`, and dropped when the goroutine's closure returns or unwinds:
//! the scheduler calls [`drop_locals`] on the goroutine's own stack before
//! the goroutine is reported finished (join sees the drops done) and before
//! the G can be reused, so a reused G starts with no values. Destructors may
//! use goroutine-locals again, as std's thread-local destructors may: a key
//! not dropped yet shows its value, a new one is created and dropped in
//! turn, and a key already dropped makes `with` panic (`try_with` returns
//! an [`AccessError`], as std's do). A
//! destructor's panic is the goroutine's: its `join` returns `Err` (std
//! aborts the process for a thread-local's), unless the closure itself
//! panicked; the other values are dropped all the same.
//!
//! # Plain threads
//!
//! On a thread that is not running a goroutine, each key falls back to a
//! `std::thread_local!` declared by the macro next to it: per-thread
//! values with std's lifetime rules.
//!
//! # Migration
//!
//! A goroutine may resume on another OS thread after any switch point, and
//! its locals move with it (they are reached through the G, never through
//! a thread-local). As for any value on a goroutine's stack, a `T` that is
//! tied to the OS thread that created it (holds a std `MutexGuard`, caches a
//! thread id) must not be kept in a goroutine-local across switch points.

use core::any::Any;
use core::ptr;

/// A goroutine's table of local values (see the module docs).
struct Locals {
    /// (key address, value), sorted by key.
    entries: Vec<(usize, Box<dyn Any>)>,
    /// Keys whose values the goroutine's exit has dropped or is dropping,
    /// sorted: `with` on them panics, as std's does for a thread-local
    /// during or after its destruction. Only [`drop_locals`] adds to it.
    destroyed: Vec<usize>,
}

/// A key for goroutine-local storage, declared with
/// [`goroutine_local!`](crate::goroutine_local); the goroutine counterpart of
/// `std::thread::LocalKey`. Go has no goroutine-local storage: Go code
/// passes such state down explicitly (often in a `context.Context`).
pub struct LocalKey<T: 'static> {
    /// Builds a goroutine's initial value.
    init: fn() -> T,
    /// The calling plain thread's value (std thread-local fallback), or
    /// None once the thread's locals are being destroyed.
    thread: fn() -> Option<*const T>,
}

/// The error of [`LocalKey::try_with`]: the calling goroutine's value (or,
/// on a plain thread, the thread's) was already destroyed. std's
/// `std::thread::AccessError`, for goroutine-locals. Go has no
/// goroutine-local storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError {
    /// On a plain thread (the std fallback), rather than in a goroutine.
    thread: bool,
}

impl core::fmt::Display for AccessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.thread {
            "cannot access a Thread Local Storage value during or after destruction"
        } else {
            "cannot access a goroutine-local during or after its destruction"
        })
    }
}

impl std::error::Error for AccessError {}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    /// Used by `goroutine_local!`; not public API.
    pub const fn __new(init: fn() -> T, thread: fn() -> Option<*const T>) -> LocalKey<T> {
        LocalKey { init, thread }
    }

    /// Calls `f` with a reference to the calling goroutine's value,
    /// creating it from the initialiser on first use in this goroutine. On a
    /// plain OS thread, uses that thread's value instead.
    ///
    /// Panics if the initialiser panics, or when called for a value already
    /// destroyed: in a goroutine, from a goroutine-local destructor running
    /// at exit after this key's value was dropped (or by its own
    /// destructor); on a plain thread, while the thread's locals are being
    /// destroyed. As std's `with` does; [`try_with`](LocalKey::try_with)
    /// returns an error for a destroyed value instead.
    /// Never blocks (beyond what the initialiser and `f` do).
    pub fn with<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&T) -> R,
    {
        match self.try_with(f) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`with`](LocalKey::with), but returns `Err(AccessError)` rather
    /// than panic when the value was already destroyed (std's
    /// `LocalKey::try_with`): what a goroutine-local destructor uses to
    /// reach another key that the goroutine's exit may have dropped
    /// already. Creates the value on first use as `with` does (also during
    /// the exit, for a key not dropped yet), and panics if the initialiser
    /// panics. Never blocks (beyond what the initialiser and `f` do).
    pub fn try_with<F, R>(&'static self, f: F) -> Result<R, AccessError>
    where
        F: FnOnce(&T) -> R,
    {
        let gp = crate::m::getg();
        if gp.is_null() {
            let v = (self.thread)().ok_or(AccessError { thread: true })?;
            // SAFETY: `thread` returned Some, so std's `try_with` found this
            // thread's `thread_local!` value alive (not being destroyed); it
            // lives until the thread exits, and we stay on this thread (a
            // plain thread does not migrate) while `f` runs.
            return Ok(f(unsafe { &*v }));
        }
        let v = self.goroutine_value(gp)?;
        // SAFETY: goroutine_value returned Ok, so v points into a Box owned
        // by this goroutine's table (not a destroyed key's); the box is freed
        // only by drop_locals (when the goroutine is done, never while `f`
        // runs) and entries are never replaced, so it outlives `f`.
        Ok(f(unsafe { &*v }))
    }

    /// The current goroutine's value, created if needed; Err if the
    /// goroutine's exit has dropped it.
    fn goroutine_value(&'static self, gp: *mut crate::g::G) -> Result<*const T, AccessError> {
        let key = self as *const LocalKey<T> as usize;
        if let Some(v) = lookup::<T>(gp, key) {
            return Ok(v);
        }
        if destroyed(gp, key) {
            return Err(AccessError { thread: false });
        }
        // Build outside any borrow of the table: the initialiser may itself
        // use goroutine-locals (and even this one).
        let value: Box<dyn Any> = Box::new((self.init)());
        // SAFETY: gp is the running G; `locals` is touched only by the G
        // itself, which is us.
        let table = unsafe {
            let mut p = (*gp).locals.get().cast::<Locals>();
            if p.is_null() {
                p = Box::into_raw(Box::new(Locals {
                    entries: Vec::new(),
                    destroyed: Vec::new(),
                }));
                (*gp).locals.set(p.cast());
            }
            &mut *p
        };
        let i = match table.entries.binary_search_by_key(&key, |e| e.0) {
            // The initialiser set this key recursively: keep that value and
            // drop ours (std keeps one value too; references to the first
            // must stay valid).
            Ok(i) => i,
            Err(i) => {
                table.entries.insert(i, (key, value));
                i
            }
        };
        Ok(downcast::<T>(&table.entries[i].1))
    }
}

/// The value for `key` in the goroutine's table, if any.
fn lookup<T: 'static>(gp: *mut crate::g::G, key: usize) -> Option<*const T> {
    // SAFETY: gp is the running G; its table is touched only by itself.
    let p = unsafe { (*gp).locals.get() }.cast::<Locals>();
    if p.is_null() {
        return None;
    }
    // SAFETY: p is this goroutine's live table; the shared borrow ends here.
    let table = unsafe { &*p };
    let i = table.entries.binary_search_by_key(&key, |e| e.0).ok()?;
    Some(downcast::<T>(&table.entries[i].1))
}

/// Whether `key`'s value has been dropped by the goroutine's exit (or is
/// being dropped).
fn destroyed(gp: *mut crate::g::G, key: usize) -> bool {
    // SAFETY: gp is the running G; its table is touched only by itself.
    let p = unsafe { (*gp).locals.get() }.cast::<Locals>();
    // SAFETY: p, if not null, is this goroutine's live table; the shared
    // borrow ends here.
    unsafe { p.as_ref() }.is_some_and(|t| t.destroyed.binary_search(&key).is_ok())
}

fn downcast<T: 'static>(v: &Box<dyn Any>) -> *const T {
    match v.downcast_ref::<T>() {
        Some(r) => r,
        None => crate::throw::throw("goroutine_local: key with two value types"),
    }
}

impl<T: 'static> core::fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

impl<T: Copy + 'static> LocalKey<core::cell::Cell<T>> {
    /// Returns a copy of the value (`with(|c| c.get())`). Never blocks; panics
    /// as [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn get(&'static self) -> T {
        self.with(|c| c.get())
    }
}

impl<T: 'static> LocalKey<core::cell::Cell<T>> {
    /// Sets the value (`with(|c| c.set(value))`). Never blocks; panics as
    /// [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn set(&'static self, value: T) {
        self.with(|c| c.set(value))
    }

    /// Replaces the value, returning the old one. Never blocks; panics as
    /// [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn replace(&'static self, value: T) -> T {
        self.with(|c| c.replace(value))
    }

    /// Takes the value, leaving `Default::default()`. Never blocks; panics as
    /// [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(|c| c.take())
    }
}

impl<T: 'static> LocalKey<core::cell::RefCell<T>> {
    /// Calls `f` with a shared borrow of the value. Panics if it is mutably
    /// borrowed. Never blocks (beyond `f`); panics also as
    /// [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn with_borrow<F: FnOnce(&T) -> R, R>(&'static self, f: F) -> R {
        self.with(|c| f(&c.borrow()))
    }

    /// Calls `f` with a mutable borrow of the value. Panics if it is borrowed.
    /// Never blocks (beyond `f`); panics also as [`with`](LocalKey::with)
    /// does. No Go counterpart (Go has no goroutine-local storage).
    pub fn with_borrow_mut<F: FnOnce(&mut T) -> R, R>(&'static self, f: F) -> R {
        self.with(|c| f(&mut c.borrow_mut()))
    }

    /// Sets the value. Panics if it is borrowed. Never blocks; panics also as
    /// [`with`](LocalKey::with) does. No Go counterpart (Go has no
    /// goroutine-local storage).
    pub fn set(&'static self, value: T) {
        self.with(|c| *c.borrow_mut() = value)
    }

    /// Replaces the value, returning the old one. Panics if it is borrowed.
    /// Never blocks; panics also as [`with`](LocalKey::with) does. No Go
    /// counterpart (Go has no goroutine-local storage).
    pub fn replace(&'static self, value: T) -> T {
        self.with(|c| c.replace(value))
    }

    /// Takes the value, leaving `Default::default()`. Panics if it is
    /// borrowed. Never blocks; panics also as [`with`](LocalKey::with) does.
    /// No Go counterpart (Go has no goroutine-local storage).
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(|c| c.take())
    }
}

/// Declares goroutine-local statics: `thread_local!` syntax, one value per
/// goroutine.
///
/// ```
/// use std::cell::Cell;
/// goro::goroutine_local! {
///     /// Requests served by this goroutine.
///     static SERVED: Cell<u32> = Cell::new(0);
/// }
/// goro::run(|| {
///     SERVED.with(|s| s.set(s.get() + 1));
///     let other = goro::go!(|| SERVED.with(|s| s.get())).join().unwrap();
///     assert_eq!(other, 0); // a new goroutine starts from the initial value
///     assert_eq!(SERVED.with(|s| s.get()), 1);
/// });
/// ```
///
/// Each goroutine starts from the initialiser (evaluated lazily, on its
/// first `with`), also when its G is reused; values are dropped when the
/// goroutine finishes (returns or panics), before `join` returns; a panic in
/// a destructor there makes `join` return `Err` (std aborts). On a plain
/// OS thread the key falls back to per-thread storage (`thread_local!`).
/// Usable at module level and inside function bodies; the initialiser may
/// be written `const { ... }` as with `thread_local!` (it is still evaluated
/// per goroutine). See [`LocalKey`].
#[macro_export]
macro_rules! goroutine_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block; $($rest:tt)*) => {
        $crate::goroutine_local!($(#[$attr])* $vis static $name: $t = $init; $($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block) => {
        $crate::goroutine_local!($(#[$attr])* $vis static $name: $t = $init);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $crate::goroutine_local!($(#[$attr])* $vis static $name: $t = $init);
        $crate::goroutine_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $(#[$attr])* $vis static $name: $crate::LocalKey<$t> = {
            fn __goro_local_init() -> $t {
                $init
            }
            fn __goro_local_thread() -> ::core::option::Option<*const $t> {
                ::std::thread_local! {
                    static __GORO_LOCAL_FALLBACK: $t = __goro_local_init();
                }
                __GORO_LOCAL_FALLBACK.try_with(|v| v as *const $t).ok()
            }
            $crate::LocalKey::__new(__goro_local_init, __goro_local_thread)
        };
    };
}

/// Drops the current goroutine's locals ([`drop_locals`]) after its
/// closure has finished with `r`, and returns the goroutine's result: `r`,
/// or, if the closure returned but a destructor panicked, that panic. A
/// goroutine-local destructor runs on the goroutine's stack as part of
/// its exit, so its panic is the goroutine's, as the closure's is (`join`
/// returns `Err`; std aborts the process for a thread-local's). The
/// closure's own panic, if any, is the one kept. Before h43 a destructor's
/// panic was caught and discarded: `join` returned `Ok`.
///
/// The closure's value is dropped here when it is replaced; a panic in
/// its destructor then is reported by the hook and goes no further (it
/// would be a second panic of the goroutine).
pub(crate) fn drop_locals_into<T>(r: std::thread::Result<T>) -> std::thread::Result<T> {
    let Err(payload) = std::panic::catch_unwind(drop_locals) else {
        return r;
    };
    if r.is_err() {
        // The closure's panic stands; this one was reported by the hook.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
        return r;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(r)));
    // The value's destructor may have used goroutine-locals again.
    let _ = std::panic::catch_unwind(drop_locals);
    Err(payload)
}

/// Drops the current goroutine's locals. Called on the goroutine's own
/// stack right after its closure returns (or panics), so destructors run
/// in the goroutine. One value at a time, taken out of the table, its key
/// marked destroyed first: a destructor may use a key not dropped yet (it
/// sees that value) or a new one (created, then dropped by this loop), and
/// panics on a dropped one, as std's thread-locals behave. Each key is
/// thus dropped at most once per call, so the loop ends (before h31 a
/// destructor that touched its own key re-created it for ever: the
/// goroutine never finished). Leaves the G with no table (it may be reused).
pub(crate) fn drop_locals() {
    let gp = crate::m::getg();
    if gp.is_null() {
        return;
    }
    let mut first_panic = None;
    loop {
        // SAFETY: the running G; `locals` is touched only by the G itself,
        // and no borrow of the table lives across the destructor below
        // (`with` holds references into the values' boxes only).
        let value = unsafe {
            let p = (*gp).locals.get().cast::<Locals>();
            if p.is_null() {
                break;
            }
            let table = &mut *p;
            if table.entries.is_empty() {
                (*gp).locals.set(ptr::null_mut());
                // p came from Box::into_raw in goroutine_value and was just
                // detached from the G: its only owner.
                drop(Box::from_raw(p));
                break;
            }
            let (key, value) = table.entries.remove(0);
            if let Err(i) = table.destroyed.binary_search(&key) {
                table.destroyed.insert(i, key);
            }
            value
        };
        // A panicking destructor must not stop the others: caught, and
        // the first one resumed once the table is gone.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value)));
        if let Err(e) = r {
            first_panic.get_or_insert(e);
        }
    }
    if let Some(e) = first_panic {
        std::panic::resume_unwind(e);
    }
}
