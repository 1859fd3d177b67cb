//! ThreadSanitizer's view of goro's stack switches (built with
//! `--cfg goro_tsan`; `fiber_none.rs` is the empty twin). See
//! docs/TESTING.md, "ThreadSanitizer", for the command.
//!
//! # Why
//!
//! TSan keeps per-thread state: a vector clock (what this thread has
//! synchronised with) and a shadow call stack (the frames its reports
//! print). goro moves a thread between stacks by hand (asm/), so without
//! help TSan would take a goroutine's code for the code of whatever thread
//! runs it: a goroutine migrating from M1 to M2 would carry none of its own
//! history, and its first access to its own stack on M2 would be reported
//! as a race with its accesses on M1. TSan's fiber API gives each
//! execution context its own state: `__tsan_switch_to_fiber(f, 0)` makes
//! `f` current on this thread and, with flags 0, synchronises the old
//! context with the new one (a release on `f` then an acquire), which is
//! what a switch on one thread is: program order.
//!
//! # Who owns which fiber
//!
//! - A G gets a fiber in newproc, created by the spawning context (so the
//!   spawner's writes, the closure on the new stack among them, happen
//!   before the goroutine runs: Go's racegostart), and loses it in goexit0
//!   on g0 (Go's racegoend). A reused G struct gets a fresh fiber.
//! - An M's g0 starts as the thread's own fiber (`__tsan_get_current_fiber`
//!   in mstart: mstart's frames and g0 share the native stack), and is
//!   replaced by a created fiber every [`G0_REFRESH`] entries (below).
//!   mexit switches back to the thread's own fiber before resuming mstart,
//!   so the thread ends (pthread exit, TLS destructors) on its own state.
//! - Every switch calls `__tsan_switch_to_fiber(target, 0)` immediately
//!   before the stack switch, inside `arch::gogo`/`arch::mcall`/`switch`:
//!   nothing instrumented runs between the two (an instrumented function
//!   returning there would pop the *new* fiber's shadow stack).
//!
//! # Shadow stacks of code that never returns
//!
//! TSan's shadow stack is a fixed array (64 Ki frames) with no overflow
//! check in release builds of its runtime. Every instrumented function
//! pushes at entry and pops at return; goro has frames that never return:
//! a goroutine's entry and goexit (it leaves through mcall for good), and
//! on g0 each mcall target, `schedule` and `execute` (g0's frames are
//! abandoned at every gogo and g0 is re-entered at its base). Left alone,
//! g0's shadow stack grows by three frames per switch (seen in the first
//! TSan run: reports on g0 printed `park_m / schedule / goro_mcall`
//! repeated down past frame 160) and would overflow after some twenty
//! thousand switches on one M, writing past its mapping. Hence: a G's
//! fiber lives for one goroutine (destroyed at exit, so the dead
//! goroutine's frames go with it), and g0's fiber is replaced every
//! [`G0_REFRESH`] mcalls (every mcall, as set) by a fresh one, created on
//! the G about to mcall.
//! The G was entered from the old g0 fiber (a synchronising switch), so the
//! new fiber, which inherits its creator's clock, is ordered after
//! everything the old g0 did: no happens-before edge of g0's program order
//! is lost.

use core::cell::Cell;
use core::ffi::c_void;
use core::ptr;

extern "C" {
    fn __tsan_get_current_fiber() -> *mut c_void;
    fn __tsan_create_fiber(flags: u32) -> *mut c_void;
    fn __tsan_destroy_fiber(fiber: *mut c_void);
    fn __tsan_switch_to_fiber(fiber: *mut c_void, flags: u32);
}

/// g0 entries (mcalls) per g0 fiber. Each entry leaves a few frames on
/// g0's shadow stack (the mcall target, schedule, execute and what the
/// compiler did not inline), and TSan prints them all, oldest last, under
/// every report made on g0. With 1 — a fresh g0 fiber at every mcall — a
/// report's g0 stack is exactly the current entry's, at the price of a
/// fiber creation per switch: the TSan job ran 57 s instead of 42 s on
/// `tests/chan.rs` (2 cores). Up to ~10,000 keeps the shadow stack inside
/// its 64 Ki frames, with ever longer tails of stale frames in reports.
const G0_REFRESH: u32 = 1;

/// One execution context as TSan knows it (a TSan `ThreadState`); null
/// for none. A plain handle: whoever owns the G or M it is stored in
/// decides when it is destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fiber(*mut c_void);

impl Fiber {
    /// No fiber (a dead G's).
    pub(crate) const NONE: Fiber = Fiber(ptr::null_mut());

    /// The fiber running now: the thread's own, unless a switch made
    /// another one current.
    pub(crate) fn current() -> Fiber {
        // SAFETY: a query of TSan's per-thread state; no preconditions.
        Fiber(unsafe { __tsan_get_current_fiber() })
    }

    /// A new fiber whose clock starts from the current context's: what the
    /// caller did before happens before anything the fiber does.
    pub(crate) fn create() -> Fiber {
        // SAFETY: flags 0 is the only defined value; TSan allocates.
        Fiber(unsafe { __tsan_create_fiber(0) })
    }

    /// Destroys a fiber made by [`Fiber::create`]. No-op for [`Fiber::NONE`].
    ///
    /// # Safety
    /// The fiber is not current on any thread and is never switched to
    /// again; it is not a thread's own fiber.
    pub(crate) unsafe fn destroy(self) {
        if !self.0.is_null() {
            // SAFETY: guaranteed by the caller.
            unsafe { __tsan_destroy_fiber(self.0) }
        }
    }

    /// Makes this fiber current, synchronising with the one that was.
    /// Always inlined into the switch wrappers: a separate instrumented
    /// function would pop its frame from the new fiber's shadow stack.
    ///
    /// # Safety
    /// The caller switches stacks to this fiber's context right after,
    /// with no instrumented code in between; the fiber is live.
    #[inline(always)]
    pub(crate) unsafe fn switch_to(self) {
        // SAFETY: guaranteed by the caller (a live fiber, flags 0: sync).
        unsafe { __tsan_switch_to_fiber(self.0, 0) }
    }
}

/// An M's fibers. Owned by the M's thread (touched on g0 or by the G
/// running on it, never from elsewhere).
#[derive(Debug)]
pub(crate) struct MFibers {
    /// The thread's own fiber (set in mstart); mexit switches back to it.
    thread: Cell<Fiber>,
    /// g0's current fiber: `thread` until the first refresh, then a
    /// created one.
    g0: Cell<Fiber>,
    /// mcalls since the last refresh.
    entries: Cell<u32>,
}

impl MFibers {
    pub(crate) const fn new() -> MFibers {
        MFibers {
            thread: Cell::new(Fiber::NONE),
            g0: Cell::new(Fiber::NONE),
            entries: Cell::new(0),
        }
    }

    /// mstart, on the thread's native stack: g0 starts as the thread's
    /// own fiber.
    pub(crate) fn init(&self) {
        let f = Fiber::current();
        self.thread.set(f);
        self.g0.set(f);
        self.entries.set(0);
    }

    /// g0's fiber, for mstart's own mcall onto g0 (the same fiber then).
    pub(crate) fn g0(&self) -> Fiber {
        self.g0.get()
    }

    /// The thread's own fiber, for mexit's switch back to mstart.
    pub(crate) fn thread(&self) -> Fiber {
        self.thread.get()
    }

    /// g0's fiber for an mcall from the G running on this M, replaced by
    /// a fresh one every [`G0_REFRESH`] calls (see "Shadow stacks of code
    /// that never returns" above). On the G, before the switch.
    pub(crate) fn g0_for_mcall(&self) -> Fiber {
        let n = self.entries.get() + 1;
        if n < G0_REFRESH {
            self.entries.set(n);
            return self.g0.get();
        }
        self.entries.set(0);
        let old = self.g0.replace(Fiber::create());
        if old != self.thread.get() {
            // SAFETY: the old g0 fiber is not current (this G is) and no
            // longer reachable from the M; it was created, not a thread's.
            unsafe { old.destroy() };
        }
        self.g0.get()
    }

    /// mstart after mexit resumed it, on the thread's own fiber: destroys
    /// a created g0 fiber.
    pub(crate) fn release(&self) {
        let g0 = self.g0.replace(Fiber::NONE);
        if g0 != self.thread.get() {
            // SAFETY: g0 is not current (the thread's own fiber is, since
            // mexit switched to it) and the M never runs g0 again.
            unsafe { g0.destroy() };
        }
    }
}
