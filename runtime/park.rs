//! gopark/goready and the other mcall entry points (Gosched, goexit), plus
//! `Parker`, the way a plain OS thread waits on the same wait queues.
//!
//! Parking protocol (Go's gopark): the G records an unlock function on its
//! M and mcalls `park_m`; on g0, after the G's context is saved and its
//! status is Waiting, `park_m` runs the unlock function, which releases the
//! lock that made the G findable (a channel lock, a timer insertion, a CAS
//! publishing a waiter). Only then can a waker see the G and goready it, so
//! a G is never readied before it has fully stopped running.

use crate::arch;
use crate::g::{GStatus, G};
use crate::m::{getm, UnlockFn, M};
use crate::sched;
use crate::waitreason::WaitReason;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Runs `f(gp)` on the current M's g0 after saving the current G. Returns
/// when the G is resumed. Go's mcall. Must be called on a user G, inside
/// an `acquirem` section that `f` ends on g0 (`releasem`): the M cannot
/// change under the Rust code that reads it here, and g0 code never runs
/// with a stale count.
#[inline]
pub(crate) fn mcall_locked(f: arch::McallFn) {
    // SAFETY: we are on a user G of this thread's M (callers check), in a
    // critical section, so curg, g0_sp and g0's fiber are this M's and g0
    // has no live frames below g0_sp.
    unsafe {
        let m = &*getm();
        let gp = m.curg.get();
        let g0 = m.fibers.g0_for_mcall();
        arch::mcall((*gp).gobuf(), m.g0_sp.get(), g0, f, gp.cast());
    }
}

/// `acquirem` then [`mcall_locked`].
#[inline]
fn mcall(f: arch::McallFn) {
    crate::m::acquirem();
    mcall_locked(f);
}

/// g0 side of every mcall: ends the caller's critical section.
#[inline]
fn mcall_enter(m: &M) {
    crate::m::releasem(m as *const M as *mut M);
}

/// The running G if it may park: a user G whose M holds a P. Null on g0,
/// on a plain thread, and inside `enter_syscall`/`blocking` (the G has
/// given up its P): those wait by blocking the thread instead.
#[inline]
pub(crate) fn parkable_g() -> *mut G {
    // A G that blocking detection detached takes a P back first.
    let mp = crate::preempt::acquirem_with_p();
    if mp.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: this thread's M, ours inside the section; curg and p are
    // owned by it.
    let gp = unsafe {
        if (*mp).p.get().is_null() {
            core::ptr::null_mut()
        } else {
            (*mp).curg.get()
        }
    };
    crate::m::releasem(mp);
    gp
}

/// Enters a critical section and returns the M and its P (null on a plain
/// thread; P null inside a syscall). No reacquire: inside the section a
/// detached G stays as in a syscall (see preempt::reacquire). One TLS read.
#[inline]
pub(crate) fn acquirem_p() -> (*mut M, *mut crate::p::P) {
    let mp = crate::m::acquirem();
    if mp.is_null() {
        return (mp, core::ptr::null_mut());
    }
    // SAFETY: this thread's M; `p` stays its own inside the section.
    (mp, unsafe { (*mp).p.get() })
}

/// Whether the caller may park as a goroutine (see [`parkable_g`]).
#[inline]
pub(crate) fn in_goroutine() -> bool {
    !parkable_g().is_null()
}

/// Go's gopark: park the current G; on g0 run `unlockf(gp, arg)`, and if
/// it returns false resume the G at once. Returns when the G is readied.
/// `reason` (Go's waitReason) and the park time are recorded for the dump
/// and the deadlock check. Must be called on a user G.
///
/// Inlined into its caller, like [`gosched`]: the G resumes in the
/// caller's code without a `ret` of its own after the stack switch.
#[inline(always)]
pub(crate) fn gopark(unlockf: Option<UnlockFn>, arg: *mut u8, reason: WaitReason) {
    // A runtime entry: a G that blocking detection detached since its
    // caller checked it may park (`parkable_g`) takes its P back first.
    // `sleep` computes its deadline in between, in the vDSO, where a
    // REQ_PREEMPT_OR_DETACH lands and detaches; park_m then found the G
    // in Syscall ("casgstatus: bad transition Running -> Waiting (status
    // is 0x3)", time::ticker_concurrent_stress 7 of 60 runs pinned to one
    // CPU beside two busy loops). A caller inside a critical section of
    // its own (a channel's lock) cannot have been detached since it
    // entered it (the handler refuses while m.locks != 0) and is left as
    // it is by acquirem_with_p.
    let mp = crate::preempt::acquirem_with_p();
    // SAFETY: on a user G, so mp is this thread's M; ours until park_m.
    let m = unsafe { &*mp };
    // SAFETY: curg is the running G (never freed).
    let g = unsafe { &*m.curg.get() };
    if m.trace.load(Ordering::Relaxed) {
        // Inside the critical section: the trace buffer's lock must not be
        // held by a G preempted on this M (the M would then block on it).
        crate::trace::park(m.p.get(), g.goid.get(), reason);
    }
    // Relaxed: diagnostics read racily by the dump; park_m's status CAS
    // (Release) publishes them to whoever readies the G anyway.
    g.waitreason.store(reason as u8, Ordering::Relaxed);
    g.waitsince
        .store(crate::waitreason::park_clock(), Ordering::Relaxed);
    crate::preempt::pin_if_panicking(m, m.curg.get());
    m.waitunlockf.set(unlockf);
    m.waitlock.set(arg);
    mcall_locked(park_m);
}

/// g0 half of gopark.
unsafe extern "C" fn park_m(arg: *mut u8) -> ! {
    let gp = arg.cast::<G>();
    // SAFETY: g0 of this thread's M; gp is the G that just mcalled.
    let m: &M = unsafe { &*getm() };
    mcall_enter(m);
    // SAFETY: gp is valid (never freed) and owned by us.
    let g = unsafe { &*gp };
    g.cas_status(GStatus::Running, GStatus::Waiting);
    m.curg.set(core::ptr::null_mut());
    g.m.set(core::ptr::null_mut());
    if let Some(f) = m.waitunlockf.take() {
        let arg = m.waitlock.replace(core::ptr::null_mut());
        if !f(gp, arg) {
            if m.trace.load(Ordering::Relaxed) {
                // The park recorded in gopark did not happen: pair it.
                crate::trace::unpark(m.p.get(), g.goid.get());
            }
            g.cas_status(GStatus::Waiting, GStatus::Runnable);
            sched::execute(m, gp, true);
        }
    }
    sched::schedule()
}

/// Go's goready: make a parked G runnable, into the current P's runnext
/// (so it runs next, inheriting the time slice), or onto the global queue
/// when the caller has no P (a plain thread, sysmon). Any thread.
pub(crate) fn goready(gp: *mut G) {
    // The P read below must stay ours until runqput is done.
    let (mp, pp) = acquirem_p();
    let _ml = crate::m::MLock::of(mp);
    // SAFETY: gp is Waiting and its waker (the caller) owns it now.
    unsafe { (*gp).cas_status(GStatus::Waiting, GStatus::Runnable) };
    if crate::trace::on_m(mp) {
        // SAFETY: we own gp now; its id is stable while it lives.
        crate::trace::unpark(pp, unsafe { (*gp).goid.get() });
    }
    if !pp.is_null() {
        // SAFETY: we hold pp (it is our M's P).
        sched::runqput(unsafe { &*pp }, gp, true);
        sched::wakep();
        return;
    }
    sched::globrunqput_and_wake(gp);
}

/// Go's Gosched: put the current G at the tail of its P's local queue and
/// schedule. (Go puts it on the global queue; the local tail keeps one-P
/// yield loops off sched.lock, and other Ps still steal it.)
///
/// Inlined into its caller: the goroutine resumes after the switch
/// straight in the caller's code, with no `ret` of a frame of its own (a
/// `ret` after a stack switch misses the return stack buffer: ~7 ns of
/// a 30 ns yield, measured).
#[inline(always)]
pub(crate) fn gosched() {
    if in_goroutine() {
        gosched_via(gosched_m);
    } else {
        crate::os::osyield();
    }
}

/// Yields the running goroutine through `f` (`gosched_m` or
/// `gopreempt_m`) on g0. Must be called on a user G that may park.
/// Inlined for the reason `gosched` is.
#[inline(always)]
fn gosched_via(f: arch::McallFn) {
    let mp = crate::m::acquirem();
    // SAFETY: on a user G (the caller checked): this thread's M.
    crate::preempt::pin_if_panicking(unsafe { &*mp }, crate::m::getg());
    mcall_locked(f);
}

unsafe extern "C" fn gosched_m(arg: *mut u8) -> ! {
    gosched_impl(arg.cast::<G>(), false)
}

/// Go's goschedImpl, on g0: the running G `gp` becomes Runnable and goes
/// to the global queue if `global`, else to the tail of the M's P's local
/// queue; then schedule.
fn gosched_impl(gp: *mut G, global: bool) -> ! {
    // SAFETY: g0 of this M; gp just mcalled and is ours.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    mcall_enter(m);
    g.cas_status(GStatus::Running, GStatus::Runnable);
    m.curg.set(core::ptr::null_mut());
    g.m.set(core::ptr::null_mut());
    if global {
        sched::SCHED.lock.lock().globrunqput(gp);
        sched::end_slice(m);
    } else {
        // SAFETY: we hold the M's P.
        sched::runqput(unsafe { &*m.p.get() }, gp, false);
    }
    if m.trace.load(Ordering::Relaxed) {
        crate::trace::slice_end();
    }
    sched::schedule()
}

/// Go's goexit1: finish the current G. Called at the end of its entry.
pub(crate) fn goexit() -> ! {
    // goexit0 needs a P: a detached G takes one back first, and a G that
    // forgot a SyscallGuard (mem::forget) exits its syscall implicitly.
    crate::preempt::reacquire();
    let gp = crate::m::getg();
    // SAFETY: the running G.
    if unsafe { (*gp).status() } == GStatus::Syscall {
        crate::syscall::exitsyscall();
    }
    mcall(goexit0);
    crate::throw::throw("goexit: dead goroutine resumed")
}

unsafe extern "C" fn goexit0(arg: *mut u8) -> ! {
    let gp = arg.cast::<G>();
    // SAFETY: g0 of this M; gp just mcalled and is ours.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    mcall_enter(m);
    g.cas_status(GStatus::Running, GStatus::Dead);
    m.curg.set(core::ptr::null_mut());
    g.m.set(core::ptr::null_mut());
    g.goid.set(0);
    // The name is taken under NAMES (a dump racing the exit may be
    // reading it) and dropped after.
    // SAFETY: the G is dead and ours: only a dump may read the field
    // meanwhile, and a read alongside ours is no race.
    if unsafe { (*g.name.get()).is_some() } {
        let name = {
            let _names = crate::g::NAMES.lock();
            // SAFETY: dump reads the field only under NAMES, which we hold.
            unsafe { (*g.name.get()).take() }
        };
        drop(name);
    }
    // SAFETY: the goroutine's fiber is not current (we switched to g0's)
    // and the dead goroutine is never resumed; newproc gives the G struct
    // a fresh fiber when it is reused.
    unsafe { g.fiber.replace(arch::Fiber::NONE).destroy() };
    g.preempt.store(false, Ordering::Relaxed);
    let locked = !g.lockedm.replace(core::ptr::null_mut()).is_null();
    g.locked_count.set(0);
    // SAFETY: we hold the M's P.
    let pp = unsafe { &*m.p.get() };
    pp.ngoroutines_add(-1);
    sched::gfput(pp, gp);
    if m.trace.load(Ordering::Relaxed) {
        crate::trace::slice_end();
    }
    if locked {
        sched::retire_locked_m(m);
    }
    sched::schedule()
}

/// Go's LockOSThread: wire the calling goroutine to its current OS thread
/// until as many `unlock_os_thread` calls. Outside a goroutine: no-op.
pub(crate) fn lock_os_thread() {
    let _ml = crate::m::MLock::new();
    let gp = crate::m::getg();
    if gp.is_null() {
        return;
    }
    // SAFETY: the running G on this thread's M; only it touches these.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    let n = g.locked_count.get();
    if n == u32::MAX {
        crate::throw::throw("LockOSThread nesting overflow");
    }
    g.locked_count.set(n + 1);
    if n == 0 && g.pinned.get() == crate::g::Pin::No {
        g.lockedm.set(m as *const M as *mut M);
        m.lockedg.set(gp);
    }
}

/// Go's UnlockOSThread: undo one `lock_os_thread`; at zero the goroutine
/// may migrate again. Extra calls are no-ops (as in Go).
pub(crate) fn unlock_os_thread() {
    let _ml = crate::m::MLock::new();
    let gp = crate::m::getg();
    if gp.is_null() {
        return;
    }
    // SAFETY: as in lock_os_thread.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    let n = g.locked_count.get();
    if n == 0 {
        return;
    }
    g.locked_count.set(n - 1);
    if n == 1 {
        g.lockedm.set(core::ptr::null_mut());
        m.lockedg.set(core::ptr::null_mut());
    }
}

/// Cooperative preemption point: yield if sysmon or stop-the-world asked
/// this G to (Go's stack-check preemption). Cheap; called at runtime entries.
#[inline]
pub(crate) fn preempt_check() {
    // Fast path: a TLS read and two loads, inline (the flag is almost
    // never set). The hint may be another G in migrating mode (getg_hint);
    // the slow path checks that it is ours.
    let gp = crate::m::getg_hint();
    // SAFETY: gp is a G (Gs are never freed) or null, and `preempt` is an
    // atomic any thread may read.
    if gp.is_null() || !unsafe { (*gp).preempt.load(Ordering::Relaxed) } {
        return;
    }
    preempt_check_slow(gp);
}

#[cold]
fn preempt_check_slow(gp: *mut G) {
    // Only a G that may park yields (not inside a syscall); under the test
    // knob goroasynconly=1 the signal alone acts on the flag.
    if crate::preempt::ASYNC_ONLY.load(Ordering::Relaxed) || parkable_g() != gp {
        return;
    }
    // SAFETY: the running G.
    unsafe { (*gp).preempt.store(false, Ordering::Relaxed) };
    crate::sysmon::PREEMPTIONS.fetch_add(1, Ordering::Relaxed);
    if crate::trace::on() {
        let ml = crate::m::MLock::new();
        // SAFETY: gp is the running G; its goid is written only by the G's
        // owner, which is us.
        crate::trace::preempt(unsafe { (*gp).goid.get() }, false);
        drop(ml);
    }
    gosched_via(gopreempt_m);
}

/// Go's gopreempt_m: a G preempted at a runtime entry goes to the *global*
/// queue (as in Go's goschedImpl), behind the work already waiting there,
/// not to its P's local tail as `yield_now` does. A goroutine that was
/// preempted for running 10 ms while others waited thus waits for them
/// in turn: a spawner racing ahead of its consumers (spawn_wait) lets the
/// backlog drain instead of growing it. Also the g0 half of an
/// asynchronous preemption (preempt.rs): a pinned G's M then sleeps in
/// schedule's stoplockedm until the G is handed back to it.
pub(crate) unsafe extern "C" fn gopreempt_m(arg: *mut u8) -> ! {
    gosched_impl(arg.cast::<G>(), true)
}

/// `Parker::flag` while its thread is blocked in `park` (0: not parked
/// yet, 1: woken).
const PARKED: u32 = 2;

/// A plain OS thread's stand-in for gopark/goready: a futex flag plus the
/// wake parameter (what `g.param` is for a G). Lives on the waiting
/// thread's stack; one wake per park.
pub(crate) struct Parker {
    /// 0, PARKED or 1 (woken). `unpark`'s Release swap pairs with the
    /// parker's Acquire CAS and loads.
    flag: AtomicU32,
    /// Wake parameter (the winning sudog for select), set before `flag`.
    /// Relaxed: published by `flag`'s Release/Acquire.
    pub(crate) param: AtomicUsize,
}

impl Parker {
    pub(crate) const fn new() -> Parker {
        Parker {
            flag: AtomicU32::new(0),
            param: AtomicUsize::new(0),
        }
    }

    /// Blocks the thread until `unpark`. Counted as a parked plain thread
    /// for the deadlock check (deadlock.rs, condition 4): the flag goes
    /// 0 -> PARKED here, and the waker that swaps PARKED -> 1 uncounts it.
    pub(crate) fn park(&self) {
        // Acquire (also on failure): pairs with unpark's Release, so the
        // waker's writes are visible if it came first.
        if self
            .flag
            .compare_exchange(0, PARKED, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
            crate::deadlock::plain_parked();
        }
        // Acquire pairs with unpark's Release: the waker's writes are visible.
        while self.flag.load(Ordering::Acquire) != 1 {
            crate::os::futex_wait(&self.flag, PARKED, None);
        }
    }

    /// Blocks until `unpark` or the monotonic deadline (ns); true if woken.
    pub(crate) fn park_deadline(&self, deadline: i64) -> bool {
        loop {
            if self.flag.load(Ordering::Acquire) != 0 {
                return true;
            }
            let now = crate::os::nanotime();
            if now >= deadline {
                return false;
            }
            let d = std::time::Duration::from_nanos((deadline - now) as u64);
            crate::os::futex_wait(&self.flag, 0, Some(d));
        }
    }

    /// Wakes the parked thread with `param`. The Parker may be gone right
    /// after the flag store; the futex wake on a stale address is harmless
    /// (futex waiters tolerate spurious wake-ups).
    pub(crate) fn unpark(&self, param: usize) {
        self.param.store(param, Ordering::Relaxed); // published by the Release below
        let addr: *const AtomicU32 = &self.flag;
        // Release: publishes param and the waker's writes to the parker.
        // After this swap the Parker may be gone (touch only `addr`).
        if self.flag.swap(1, Ordering::Release) == PARKED {
            crate::deadlock::plain_unparked();
        }
        crate::os::futex_wake(addr, 1);
    }
}

/// exitsyscall slow path: no P was free. On g0: queue the G globally and
/// park the M (Go's exitsyscall0). The caller is in an acquirem section,
/// which exitsyscall0 ends.
pub(crate) fn exitsyscall_slow_locked() {
    mcall_locked(exitsyscall0);
}

unsafe extern "C" fn exitsyscall0(arg: *mut u8) -> ! {
    let gp = arg.cast::<G>();
    // SAFETY: g0 of this M; gp just mcalled and is ours.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    mcall_enter(m);
    g.cas_status(GStatus::Syscall, GStatus::Runnable);
    m.curg.set(core::ptr::null_mut());
    g.m.set(core::ptr::null_mut());
    match sched::pidleget_locked() {
        Some(pp) => {
            sched::acquirep(m, pp);
            g.cas_status(GStatus::Runnable, GStatus::Running);
            // Release: as in execute (m.curg's doc).
            m.curg.publish(gp);
            g.m.set(m as *const M as *mut M);
            // SAFETY: gp's context was saved by the mcall into exitsyscall0
            // and its fiber is live (a running goroutine's); the status CAS
            // above made it ours; g0's frames are dead.
            unsafe { arch::gogo((*g.gobuf()).sp, g.fiber.get()) }
        }
        None => {
            if m.trace.load(Ordering::Relaxed) {
                crate::trace::slice_end();
            }
            // A G unwinding a panic resumes on this thread (std's panic
            // count is thread-local), as when it parks: pinned before any
            // other M can see it. g0 shares the G's thread, hence its
            // panic count.
            crate::preempt::pin_if_panicking(m, gp);
            sched::globrunqput_and_wake(gp);
            // A locked M waits in schedule (stoplockedm) for its G instead.
            if m.lockedg.get().is_null() {
                sched::stopm(m);
            }
            sched::schedule()
        }
    }
}
