//! Scoped goroutines: `goro::scope`, the goroutine form of
//! `std::thread::scope`.
//!
//! Go has no counterpart because Go has a garbage collector: a goroutine
//! may write into a slice its spawner owns, and the slice lives as long as
//! anyone refers to it. In Rust the spawner's data lives in its frame, so
//! a goroutine may borrow it only if the frame is known to outlive the
//! goroutine. `scope` gives that guarantee the way std does for threads:
//! it does not return (nor unwind) until every goroutine spawned in it has
//! finished, so their closures may borrow anything that outlives the call.
//! This is what Go code shaped as "spawn one goroutine per row block, each
//! writes its rows, `wg.Wait()`" needs (h13's matrix multiply had to copy
//! each block back through `join` without it).
//!
//! # Why the lifetime erasure is sound
//!
//! goro's spawn takes `'static` closures. A scoped spawn boxes its closure
//! (borrowing `'scope` data) and erases the box's lifetime to `'static`.
//! The box's body, in this order: runs the user's closure (consuming it),
//! drops the goroutine's locals, stores the result in the handle's slot,
//! drops its reference to the slot (so a result nobody will join is
//! dropped here, while the scope still waits; locals its destructor
//! re-creates are dropped next), and last of all calls `WaitGroup::done`
//! from a guard that also runs if anything before it unwinds. [`scope`] calls `wait` after its
//! closure has returned or unwound, and only then returns or resumes the
//! unwinding: when `wait` returns, every scoped closure has finished with
//! everything it borrowed, and its goroutine-locals (all `'static`) are
//! dropped. The goroutine's own epilogue after the box (the `()` result
//! of the inner handle) touches only `'static` data.

use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::lock_futex::RtMutex as Mutex;

use crate::proc::{spawn_with, Builder, JoinHandle};
use crate::sync::WaitGroup;

/// Creates a scope for spawning goroutines that borrow from the caller
/// (std's `thread::scope` for goroutines; Go's `go` + `sync.WaitGroup`
/// with the borrow checker's blessing).
///
/// `f` gets a [`Scope`] to spawn with. Every goroutine spawned in the scope
/// (by `f` or by other scoped goroutines) is waited for before `scope`
/// returns, whether or not it was joined, its goroutine-locals dropped
/// (unlike std's scope, which may return before a scoped thread's
/// thread-locals are destroyed): the wait parks the calling
/// goroutine, or blocks the calling OS thread outside goroutines (the
/// runtime starts if needed, as for [`crate::spawn`]).
///
/// Panics: if `f` panics, `scope` waits for the goroutines and then
/// resumes that panic; otherwise, if a scoped goroutine panicked and its
/// handle was not joined, or the result of a handle dropped unjoined
/// panicked in its destructor, `scope` panics with "a scoped goroutine
/// panicked" (after the wait). A joined goroutine's panic is only in its
/// `join` result, as with std.
///
/// ```
/// let mut rows = vec![0u64; 8];
/// goro::scope(|s| {
///     for (i, r) in rows.iter_mut().enumerate() {
///         s.spawn(move || *r = i as u64 * 10);
///     }
/// });
/// assert_eq!(rows[7], 70);
/// ```
#[track_caller]
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        data: Arc::new(ScopeData {
            running: WaitGroup::new(),
            unjoined_panics: AtomicUsize::new(0),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    let r = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // The soundness of every scoped spawn rests on this wait (module doc).
    scope.data.running.wait();
    match r {
        Err(e) => resume_unwind(e),
        // Acquire: pairs with the panicking goroutine's Release increment
        // (ordered before its `done`, which `wait` observed anyway).
        Ok(_) if scope.data.unjoined_panics.load(Ordering::Acquire) > 0 => {
            panic!("a scoped goroutine panicked")
        }
        Ok(v) => v,
    }
}

/// A scope to spawn goroutines in (std's `thread::Scope`); see [`scope`].
/// Shared by reference: scoped goroutines may spawn more through it.
pub struct Scope<'scope, 'env: 'scope> {
    data: Arc<ScopeData>,
    /// Invariance over 'scope and 'env, as std's `Scope`: a scope may not
    /// be passed off as one of a longer or shorter lifetime.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

struct ScopeData {
    /// Scoped goroutines not finished yet.
    running: WaitGroup,
    /// Scoped goroutines that panicked minus the panics taken by `join`.
    unjoined_panics: AtomicUsize,
}

/// The result slot shared by a scoped goroutine and its handle.
type Slot<T> = Mutex<Option<std::thread::Result<T>>>;

/// A permission to join a scoped goroutine (std's `ScopedJoinHandle`).
/// Dropping it does not detach the goroutine from the scope: [`scope`]
/// still waits for it.
pub struct ScopedJoinHandle<'scope, T> {
    inner: JoinHandle<()>,
    slot: Arc<Slot<T>>,
    data: Arc<ScopeData>,
    _scope: PhantomData<&'scope ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a goroutine in this scope (Go's `go` statement; std's
    /// `Scope::spawn`). It may borrow anything that outlives the scope;
    /// [`scope`] waits for it. Never blocks.
    ///
    /// Panics if the goroutine's stack cannot be mapped; use
    /// [`Builder::spawn_scoped`] to get the error instead.
    #[track_caller]
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        match spawn_scoped_with(self, f, None, None) {
            Ok(h) => h,
            Err(e) => panic!("goro::Scope::spawn: {e}"),
        }
    }
}

impl Builder {
    /// Spawns a scoped goroutine with this builder's name and stack size
    /// (std's `Builder::spawn_scoped`). Errors as [`Builder::spawn`];
    /// nothing is spawned (nor waited for) then.
    pub fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> std::io::Result<ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let (stack_size, name) = self.into_parts();
        spawn_scoped_with(scope, f, stack_size, name)
    }
}

fn spawn_scoped_with<'scope, F, T>(
    scope: &'scope Scope<'scope, '_>,
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    /// Marks the goroutine finished when dropped: last, and on unwinding.
    struct Done(Arc<ScopeData>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.running.done();
        }
    }

    let slot: Arc<Slot<T>> = Arc::new(Mutex::new(None));
    let their = slot.clone();
    let data = scope.data.clone();
    data.running.add(1);
    let done = Done(data.clone());
    let main = move || {
        // Moved into locals so that the drop order is ours: locals drop in
        // reverse, so `done` (declared first) runs after `their` is gone.
        let done = done;
        let their = their;
        // The goroutine's locals die with it, before its result is
        // published and before `scope` sees it finished (as `join` does);
        // a destructor's panic is the goroutine's (drop_locals_into).
        // Before h43 they were dropped in the epilogue after this box, so
        // `scope` could return while their destructors (a per-goroutine
        // buffer flushed on drop) had not run, and a panic there was lost.
        let r = crate::local::drop_locals_into(catch_unwind(AssertUnwindSafe(f)));
        if r.is_err() {
            // Release: see `scope`'s Acquire load.
            done.0.unjoined_panics.fetch_add(1, Ordering::Release);
        }
        *their.lock() = Some(r);
        // With the handle gone, the result is dropped here. A panic in its
        // destructor is this goroutine's, and nobody can join it: counted,
        // so `scope` panics (std aborts: "thread result panicked on drop").
        // Before h31 it unwound into the epilogue and was lost: the scope
        // returned normally.
        if catch_unwind(AssertUnwindSafe(move || drop(their))).is_err() {
            // Release: see `scope`'s Acquire load.
            done.0.unjoined_panics.fetch_add(1, Ordering::Release);
        }
        // The result's destructor may have used goroutine-locals again;
        // they go too (a panic there: reported by the hook only).
        let _ = catch_unwind(crate::local::drop_locals);
        drop(done);
    };
    let main: Box<dyn FnOnce() + Send + 'scope> = Box::new(main);
    // SAFETY: only the lifetime changes. The box runs (or, if the spawn
    // fails, is dropped) before `scope` returns: `scope` waits on
    // `running`, and the box's last act, or its drop, is `done` (module
    // doc, "Why the lifetime erasure is sound").
    let main: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(main) };
    let inner = spawn_with(main, stack_size, name)?;
    Ok(ScopedJoinHandle {
        inner,
        slot,
        data,
        _scope: PhantomData,
    })
}

impl<'scope, T> ScopedJoinHandle<'scope, T> {
    /// Waits for the goroutine to finish (parks the calling goroutine, or
    /// blocks the calling OS thread) and returns its result, or
    /// `Err(payload)` if it panicked; a panic taken here does not make
    /// [`scope`] panic. No Go counterpart (Go waits with a
    /// `sync.WaitGroup`). Panics if the goroutine joins itself, as
    /// [`JoinHandle::join`](crate::JoinHandle::join).
    #[track_caller]
    pub fn join(self) -> std::thread::Result<T> {
        // The inner goroutine never unwinds past its catch_unwind, except
        // through a result's destructor, which cannot run here: this handle
        // still owns the slot. Its Err carries nothing of ours either way.
        let _ = self.inner.join();
        let r = self.slot.lock().take();
        let r = r.unwrap_or_else(|| crate::throw::throw("scoped join: no result after completion"));
        if r.is_err() {
            // Relaxed: this goroutine's increment happened before its
            // completion, which the join above observed (Acquire).
            self.data.unjoined_panics.fetch_sub(1, Ordering::Relaxed);
        }
        r
    }

    /// Whether the goroutine has finished (`join` would not wait). Never
    /// blocks. No Go counterpart.
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// The goroutine's id (as [`crate::current_id`] reports it). Never
    /// blocks. No Go counterpart (Go hides goroutine ids).
    pub fn id(&self) -> u64 {
        self.inner.id()
    }
}

impl<T> std::fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedJoinHandle")
            .field("id", &self.inner.id())
            .finish()
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").finish_non_exhaustive()
    }
}
