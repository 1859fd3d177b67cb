//! Goroutine creation and completion: newproc, the entry function,
//! `JoinHandle` and `Builder`. Go's newproc/newproc1/goexit (proc.go).

use crate::g::{GStatus, G};
use crate::park::{self, Parker};
use crate::sched::{self, SCHED};
use crate::stack;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Closures larger than this are boxed instead of copied to the stack top.
const MAX_INLINE_CLOSURE: usize = 1024;

/// The first Rust frame of every goroutine: moves the closure off the
/// stack top, runs it, and exits through goexit.
unsafe extern "C" fn goentry<F: FnOnce()>(arg: *mut u8) -> ! {
    // SAFETY: newproc wrote an F at arg and nobody else reads it.
    let f = unsafe { ptr::read(arg.cast::<F>()) };
    f();
    park::goexit()
}

/// Go's newproc: create a goroutine running `f` (which must not unwind:
/// the wrappers below catch panics) and make it runnable. `stack_size` in
/// bytes (None: the runtime default). Errors: the stack could not be mapped.
pub(crate) fn newproc<F: FnOnce() + Send + 'static>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<u64> {
    if core::mem::size_of::<F>() > MAX_INLINE_CLOSURE || core::mem::align_of::<F>() > 64 {
        let b: Box<dyn FnOnce() + Send> = Box::new(f);
        return newproc_placed(b, stack_size, name);
    }
    newproc_placed(f, stack_size, name)
}

fn newproc_placed<F: FnOnce() + Send + 'static>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<u64> {
    crate::ensure_started();
    park::preempt_check();
    // Relaxed: set once before the runtime starts (see sched::start).
    let default = SCHED.stack_size.load(Ordering::Relaxed);
    // An impossible size is the caller's error: reject it before taking a
    // G or mapping anything. A pooled size takes a G of its class, whose
    // stack fits; an unpooled one takes a default-class G and swaps its
    // stack below (the slow path).
    let (class, want) = match stack_size {
        Some(s) => match stack::size_class(stack::try_round_size(s)?, default) {
            (Some(c), size) => (c, size),
            (None, size) => (0, size),
        },
        None => (0, default),
    };
    // The P stays ours until the new G is queued.
    let (mp, pp) = park::acquirem_p();
    let _ml = crate::m::MLock::of(mp);
    // SAFETY: the P is held by this M, and stays so in the section.
    let p = unsafe { pp.as_ref() };
    let mut gp = match p {
        Some(p) => sched::gfget(p, class),
        None => sched::gfget_global(class),
    };
    if gp.is_null() {
        gp = G::alloc(None);
        // SAFETY: fresh G, ours.
        unsafe { (*gp).cas_status(GStatus::Idle, GStatus::Dead) };
    }
    // SAFETY: gp is Dead and ours (fresh or from a free list).
    let g = unsafe { &*gp };
    let st = match g.stack.get() {
        Some(s) if s.size() == want => s,
        other => {
            if let Some(s) = other {
                stack::free(s);
                g.stack.set(None);
            }
            match stack::alloc(want) {
                Ok(s) => s,
                Err(e) => {
                    // Keep the G for reuse; report the exhaustion. From a
                    // plain thread there is no P free list to return it
                    // to: the dead, stackless G is left unlisted (Gs are
                    // never freed anyway; one per failed spawn, an error
                    // path).
                    if let Some(p) = p {
                        sched::gfput(p, gp);
                    }
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "goro: cannot allocate a {} KiB goroutine stack: {e}",
                            want >> 10
                        ),
                    ));
                }
            }
        }
    };
    g.stack.set(Some(st));
    // Put the closure at the top of the stack and the first frame below it.
    let size = core::mem::size_of::<F>();
    let align = core::mem::align_of::<F>().max(16);
    let fptr = (st.hi - size) & !(align - 1);
    // SAFETY: [fptr, hi) is inside the stack, which no one runs on (the G is
    // Dead); fptr is aligned for F.
    unsafe { ptr::write(fptr as *mut F, f) };
    // SAFETY: fptr is 16-byte aligned with the whole stack below it.
    let sp = unsafe { crate::arch::init_frame(fptr, goentry::<F>, fptr as *mut u8) };
    // SAFETY: the G is ours until it is queued below.
    unsafe { (*g.gobuf()).sp = sp };
    // A fresh TSan fiber (none without cfg(goro_tsan)), created here so
    // that everything above, the closure on the stack included, happens
    // before the goroutine runs (arch/fiber_tsan.rs). goexit0 destroyed
    // the previous goroutine's.
    g.fiber.set(crate::arch::Fiber::create());
    let goid = sched::next_goid(p);
    g.goid.set(goid);
    if crate::trace::on() {
        crate::trace::spawn(goid);
    }
    // SAFETY: the G is ours until queued below.
    unsafe { *g.name.get() = name };
    g.param.store(0, Ordering::Relaxed);
    SCHED.ngoroutines.fetch_add(1, Ordering::Relaxed); // statistics only
    g.cas_status(GStatus::Dead, GStatus::Runnable);
    match p {
        Some(p) => {
            sched::runqput(p, gp, true);
            sched::wakep();
        }
        None => sched::globrunqput_and_wake(gp),
    }
    Ok(goid)
}

// ---------------------------------------------------------------------------
// Panic reports.

/// Installs, once per process (before the first goroutine is created), a
/// panic hook that wraps the one in place: a panic on a goroutine is
/// reported as std reports one on a thread, but naming the goroutine —
/// `goroutine 42 "worker-7" panicked at src/main.rs:3:5:` then the message
/// (std would say `thread '<unnamed>'`, the M's name); any other panic goes
/// to the previous hook (std's default or the user's). A hook the user sets
/// later replaces this one, as `set_hook` always does: theirs wins.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match crate::current_id() {
            Some(id) => report_goroutine_panic(id, info.payload(), info.location()),
            None => prev(info),
        }));
    });
}

/// Prints a goroutine's panic like std's default hook (message, location,
/// backtrace per RUST_BACKTRACE, the backtrace note once per process).
fn report_goroutine_panic(
    id: u64,
    payload: &(dyn std::any::Any + Send),
    loc: Option<&std::panic::Location<'_>>,
) {
    use std::io::Write;
    use std::sync::atomic::AtomicBool;
    static NOTE_PRINTED: AtomicBool = AtomicBool::new(false);
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "Box<dyn Any>"
    };
    let gp = crate::m::getg();
    // SAFETY: the running G of this thread (current_id was Some), never
    // freed; only the G itself (or newproc, while it is dead) writes its
    // name, so the read cannot race.
    let name = unsafe { (*(*gp).name.get()).clone() };
    let mut out = String::new();
    out.push_str(&format!("goroutine {id}"));
    if let Some(n) = name {
        out.push_str(&format!(" {n:?}"));
    }
    out.push_str(" panicked");
    if let Some(l) = loc {
        out.push_str(&format!(" at {}:{}:{}", l.file(), l.line(), l.column()));
    }
    out.push_str(&format!(":\n{msg}\n"));
    let bt = std::backtrace::Backtrace::capture();
    if bt.status() == std::backtrace::BacktraceStatus::Captured {
        out.push_str(&format!("stack backtrace:\n{bt}\n"));
    } else if bt.status() == std::backtrace::BacktraceStatus::Disabled
        // Relaxed: a once-only flag; a race prints the note twice at most.
        && !NOTE_PRINTED.swap(true, Ordering::Relaxed)
    {
        out.push_str(
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
        );
    }
    // One write, so reports of concurrent panics do not interleave.
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

// ---------------------------------------------------------------------------
// Join.

const PENDING: usize = 0;
const DONE: usize = 1;

/// Result slot shared by a goroutine and its JoinHandle. `state` is
/// PENDING, DONE, or a pointer to the joiner's `Waiter` (parked).
struct Packet<T> {
    state: AtomicUsize,
    result: UnsafeCell<Option<std::thread::Result<T>>>,
}

// SAFETY: `result` is written once by the goroutine before the Release swap
// to DONE and read by the joiner after an Acquire load of DONE.
unsafe impl<T: Send> Sync for Packet<T> {}

/// A parked joiner: a goroutine or a thread.
struct Waiter {
    g: *mut G,
    parker: Parker,
}

impl<T> Packet<T> {
    /// Goroutine side: publish the result and wake the joiner if parked.
    fn complete(&self, r: std::thread::Result<T>) {
        // SAFETY: only the goroutine writes, before publishing DONE.
        unsafe { *self.result.get() = Some(r) };
        // AcqRel: Release publishes the result; Acquire sees the waiter.
        let prev = self.state.swap(DONE, Ordering::AcqRel);
        if prev != PENDING && prev != DONE {
            let w = prev as *const Waiter;
            // SAFETY: the joiner's Waiter stays live until it is woken.
            unsafe {
                if (*w).g.is_null() {
                    (*w).parker.unpark(0);
                } else {
                    park::goready((*w).g);
                }
            }
        }
    }

    fn take(&self) -> std::thread::Result<T> {
        // SAFETY: state is DONE (Acquire-loaded by the caller): the writer is done.
        match unsafe { (*self.result.get()).take() } {
            Some(r) => r,
            None => crate::throw::throw("join: result taken twice"),
        }
    }
}

fn join_commit(_gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg is (&AtomicUsize state, &Waiter) on the parked G's stack.
    let (state, w) = unsafe { *(arg as *const (*const AtomicUsize, *const Waiter)) };
    // AcqRel: Release publishes the waiter; failing means DONE: resume.
    // SAFETY: state points into the Packet the joiner holds an Arc to.
    unsafe { &*state }
        .compare_exchange(PENDING, w as usize, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// An owned permission to join a goroutine (like `std::thread::JoinHandle`).
/// Dropping it detaches the goroutine.
pub struct JoinHandle<T> {
    packet: Arc<Packet<T>>,
    id: u64,
    /// `fn() -> T`, not `T`: the handle only ever yields a T, so it is
    /// `Send + Sync` for any `T: Send` (like std's), not only `T: Sync`.
    _t: PhantomData<fn() -> T>,
}

impl<T> JoinHandle<T> {
    /// Waits for the goroutine to finish: parks the calling goroutine, or
    /// blocks the calling OS thread. `Err(payload)` if it panicked.
    pub fn join(self) -> std::thread::Result<T> {
        let p = &*self.packet;
        // Acquire: pairs with complete's Release.
        if p.state.load(Ordering::Acquire) != DONE {
            let gp = park::parkable_g();
            let w = Waiter {
                g: gp,
                parker: Parker::new(),
            };
            if !gp.is_null() {
                let args: (*const AtomicUsize, *const Waiter) = (&p.state, &w);
                park::gopark(
                    Some(join_commit),
                    &args as *const _ as *mut u8,
                    crate::waitreason::WaitReason::Join,
                );
            } else if p
                .state
                .compare_exchange(
                    PENDING,
                    &w as *const Waiter as usize,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                w.parker.park();
            }
            // Acquire: pairs with complete's Release swap.
            if p.state.load(Ordering::Acquire) != DONE {
                crate::throw::throw("join: woken before completion");
            }
        }
        p.take()
    }

    /// Whether the goroutine has finished (its result is ready).
    pub fn is_finished(&self) -> bool {
        self.packet.state.load(Ordering::Acquire) == DONE
    }

    /// The goroutine's id (unique per process, as `current_id` reports it).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle").field("id", &self.id).finish()
    }
}

/// Spawns with options; shared by `spawn` and `Builder::spawn`.
pub(crate) fn spawn_with<F, T>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    install_panic_hook();
    let packet = Arc::new(Packet {
        state: AtomicUsize::new(PENDING),
        result: UnsafeCell::new(None),
    });
    let their = packet.clone();
    let id = newproc(
        move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // Goroutine-locals die with the goroutine, before join sees it.
            let _ = std::panic::catch_unwind(crate::local::drop_locals);
            their.complete(r);
        },
        stack_size,
        name,
    )?;
    Ok(JoinHandle {
        packet,
        id,
        _t: PhantomData,
    })
}

/// Spawns a goroutine running `f` (Go's `go f()`); `go!` is the same.
/// The goroutine starts on the current P's runnext (it runs soon, and
/// another M may steal it). Starts the runtime if needed.
///
/// Panics if the goroutine's stack cannot be mapped (address space or
/// `vm.max_map_count` exhausted); use [`Builder::spawn`] to get the error.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match spawn_with(f, None, None) {
        Ok(h) => h,
        Err(e) => panic!("goro::spawn: {e}"),
    }
}

/// Goroutine factory with options (like `std::thread::Builder`).
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with the runtime defaults.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the goroutine (shown in diagnostics such as stack overflows).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// Stack reservation in bytes (guard page not included). Pages are
    /// committed only when touched. The runtime default
    /// ([`crate::Config::stack_size`]) is used as is; other sizes are
    /// rounded up to a power of two (at least [`crate::MIN_STACK_SIZE`],
    /// 64 KiB) up to [`crate::MAX_POOLED_STACK_SIZE`] (64 MiB), and their
    /// goroutines reuse dead ones' stacks of the same size from per-P free
    /// lists as default spawns do (no lock, no system call). Sizes above
    /// 64 MiB are rounded up to pages only and are not pooled: each such
    /// spawn and exit returns a stack to a global cache (one lock and one
    /// `madvise` each). A size above [`crate::MAX_STACK_SIZE`] (1 TiB) makes
    /// [`spawn`](Builder::spawn) return an `InvalidInput` error; a size the
    /// OS cannot map makes it return the OS error. Go's maximum goroutine
    /// stack, 1 GiB, works.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns the goroutine (Go's `go` statement), from a goroutine or a
    /// plain thread. Errors: an impossible stack size (`InvalidInput`), or
    /// its stack could not be mapped (the OS error); nothing is spawned then.
    pub fn spawn<F, T>(self, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_with(f, self.stack_size, self.name.map(String::into_boxed_str))
    }
}
