//! Blocking system calls: Go's entersyscall / exitsyscall (proc.go), lazy.
//!
//! # The syscall hand-off protocol
//!
//! A goroutine about to block its thread in the kernel should not take its
//! P down with it, but most system calls are short: handing the P to
//! another M on every call costs a thread wake-up (~10 µs) for a call of a
//! few hundred ns. Go's answer, reproduced here:
//!
//! - `enter_syscall` (Go's entersyscall) only records the state: G →
//!   Syscall, the M keeps its P as `m.oldp`, and the P's status becomes
//!   Syscall (Release: everything the owner wrote to the P happens-before a
//!   retake). No other thread is involved.
//! - sysmon's retake (sysmon.rs) CASes a P that has stayed in Syscall for a
//!   whole sysmon tick (same `syscalltick`) from Syscall to Idle and hands
//!   it off (handoffp), if there is work for it: local work, no spinning M
//!   and no idle P, or the call outlasted 10 ms.
//! - `exit_syscall` (Go's exitsyscall) fast path: CAS `oldp` back from
//!   Syscall to Running — nobody retook it — or else take any idle P; no
//!   lock on the first path. Slow path, on g0 (Go's exitsyscall0): the G
//!   goes on the global queue and the M sleeps.
//!
//! The two CASes on `p.status` decide who owns the P: exactly one of
//! sysmon (Syscall → Idle) and the returning M (Syscall → Running) wins.
//! Stop-the-world takes Syscall Ps the same way (Syscall → Stopped), so the
//! returning M must not assume its P survived: it re-checks `gcwaiting`
//! and takes the slow path while the world stops.
//!
//! `enter_syscall_block` is Go's entersyscallblock: it hands the P off at
//! once, for calls known to block long (a blocking read of a pipe, a
//! `wait`), where sysmon's tick of delay would be wasted.
//!
//! Unguarded blocking calls (a bare `std::thread::sleep`) are caught by
//! sysmon's blocking detection instead, which detaches the P through the
//! same states from the M's own SIGURG handler (preempt.rs).

use crate::g::GStatus;
use crate::m::{getm, MLock};
use crate::p::PStatus;
use crate::sched::{self, SCHED};
use core::sync::atomic::Ordering;

/// Proof of `enter_syscall`; `exit_syscall(guard)` or dropping it returns
/// the goroutine to the scheduler. Not Send: exit must happen on the same
/// goroutine (and so the same M). A guard that outlives its goroutine
/// (kept in a `thread_local!` or forgotten) is inert: the goroutine left
/// its syscall when it exited, and dropping the guard later, on another
/// goroutine, does nothing.
#[must_use = "dropping the guard immediately exits the syscall"]
pub struct SyscallGuard {
    active: bool,
    /// The goroutine in the syscall, and its id (the G struct is reused
    /// by later goroutines; ids are not).
    g: *mut crate::g::G,
    goid: u64,
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl SyscallGuard {
    const INACTIVE: SyscallGuard = SyscallGuard {
        active: false,
        g: core::ptr::null_mut(),
        goid: 0,
        _not_send: core::marker::PhantomData,
    };

    /// The guard of the running G `g`, which has just entered a syscall.
    fn active(g: &crate::g::G) -> SyscallGuard {
        SyscallGuard {
            active: true,
            g: g as *const crate::g::G as *mut crate::g::G,
            goid: g.goid.get(),
            _not_send: core::marker::PhantomData,
        }
    }
}

/// Go's entersyscall: the calling goroutine is about to make a system call
/// that may block. Cheap (a few atomic stores, no other thread involved:
/// a guarded getpid measured 227 ns against Go's 264): the P stays with the M, marked as in a
/// syscall, and sysmon hands it to another M only if the call outlasts a
/// sysmon tick (20 µs–10 ms) while other goroutines wait for it. Use it
/// for calls that usually return quickly but may block (file I/O, a
/// `getaddrinfo`, a contended `std::sync::Mutex`); for calls known to
/// block long use [`enter_syscall_block`].
///
/// Until the guard is dropped the goroutine has no P: channel operations,
/// `sleep` and joins inside block the thread rather than park. Outside a
/// goroutine, or nested inside another `enter_syscall`, this is a no-op.
pub fn enter_syscall() -> SyscallGuard {
    let _ml = MLock::new();
    // Also reacquires a P first if blocking detection had detached this M.
    let gp = crate::park::parkable_g();
    if gp.is_null() {
        return SyscallGuard::INACTIVE;
    }
    // SAFETY: on a user G holding a P (parkable_g), inside acquirem: this
    // thread's M, its running G and its P stay ours.
    let (m, g, pp) = unsafe { (&*getm(), &*gp, &*crate::m::getp()) };
    if crate::trace::on() {
        crate::trace::syscall_enter(pp.id, g.goid.get());
    }
    reentersyscall(m, g, pp);
    SyscallGuard::active(g)
}

/// Go's reentersyscall: G → Syscall, P → Syscall kept as `m.oldp`. Also
/// used by the SIGURG handler to detach a blocked M (async-signal-safe:
/// atomics and plain stores only). The caller owns `m`, `g` and `pp`.
pub(crate) fn reentersyscall(m: &crate::m::M, g: &crate::g::G, pp: &crate::p::P) {
    g.cas_status(GStatus::Running, GStatus::Syscall);
    pp.syscalltick.fetch_add(1, Ordering::Relaxed); // sysmon's progress marker
    m.oldp.set(pp as *const _ as *mut _);
    m.p.set(core::ptr::null_mut());
    pp.m.set(core::ptr::null_mut());
    // Release: the owner's writes to the P happen-before whoever retakes it
    // (sysmon's or stop-the-world's CAS, AcqRel).
    pp.set_status(PStatus::Syscall);
}

/// Go's entersyscallblock: like [`enter_syscall`], but hands the P to
/// another M at once (costs a thread wake-up when there is work). For
/// calls known to block for long: the P is not held for the sysmon tick
/// that the lazy hand-off waits. No-op outside a goroutine.
pub fn enter_syscall_block() -> SyscallGuard {
    let _ml = MLock::new();
    let gp = crate::park::parkable_g();
    if gp.is_null() {
        return SyscallGuard::INACTIVE;
    }
    // SAFETY: as in enter_syscall.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    g.cas_status(GStatus::Running, GStatus::Syscall);
    let pp = sched::releasep(m);
    if crate::trace::on() {
        // The call, and the end of our slice on the P, before another M
        // can run on it.
        // SAFETY: pp was ours until releasep; nobody else has it before
        // handoffp, and Ps are never freed.
        let p = unsafe { &*pp };
        crate::trace::syscall_enter(p.id, g.goid.get());
        crate::trace::syscall_handoff(p.id);
    }
    // SAFETY: pp was ours until releasep.
    unsafe { (*pp).syscalltick.fetch_add(1, Ordering::Relaxed) };
    m.oldp.set(core::ptr::null_mut());
    crate::sysmon::HANDOFFS.fetch_add(1, Ordering::Relaxed); // statistics only
    sched::handoffp(pp);
    SyscallGuard::active(g)
}

/// Go's exitsyscall: take the P back (the one held before the call if
/// sysmon did not retake it, else any idle P), or queue the goroutine
/// globally and park the M until it runs again. Consumes the guard; the
/// goroutine may continue on another M.
pub fn exit_syscall(mut guard: SyscallGuard) {
    guard.exit();
}

impl SyscallGuard {
    fn exit(&mut self) {
        if !self.active {
            return;
        }
        self.active = false;
        let gp = crate::m::getg();
        // Another goroutine than the one that entered (reached through a
        // thread-local, after that one exited — which ended its syscall):
        // nothing to do. The goid tells a reused G struct apart. The
        // running G's own fields: no race.
        // SAFETY: gp is null or the running G (Gs are never freed).
        if gp != self.g || unsafe { (*gp).goid.get() } != self.goid {
            return;
        }
        // SAFETY: as above.
        if unsafe { (*gp).status() } != GStatus::Syscall {
            return;
        }
        exitsyscall();
    }
}

impl Drop for SyscallGuard {
    fn drop(&mut self) {
        self.exit();
    }
}

impl core::fmt::Debug for SyscallGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SyscallGuard")
            .field("active", &self.active)
            .finish()
    }
}

/// Go's exitsyscall for the running G (status Syscall, no P). User G only.
pub(crate) fn exitsyscall() {
    exitsyscall_locked(crate::m::acquirem());
}

/// [`exitsyscall`] inside a critical section the caller entered (`mp`
/// from acquirem), which this ends — on g0 if it must park — so that no
/// asynchronous preemption or detach can land between the checks and the
/// state change.
pub(crate) fn exitsyscall_locked(mp: *mut crate::m::M) {
    // SAFETY: a user G of this thread's M in a syscall (the guard is !Send,
    // or preempt::reacquire checked the state), inside acquirem.
    let (m, g) = unsafe { (&*mp, &*crate::m::getg()) };
    let oldp = m.oldp.replace(core::ptr::null_mut());
    if exitsyscallfast(m, g, oldp) {
        g.cas_status(GStatus::Syscall, GStatus::Running);
        crate::m::releasem(mp);
        return;
    }
    if crate::trace::on() {
        crate::trace::syscall_exit(oldp, core::ptr::null(), false, g.goid.get());
    }
    crate::park::exitsyscall_slow_locked();
}

/// Go's exitsyscallfast: CAS `oldp` back (Syscall → Running), else take
/// an idle P. Returns whether the M now holds a P.
///
/// The trace's exit event is recorded on each path once the P is taken,
/// so that it can say which P and how (Go's GoSysExit is also written
/// once the G has its P): a goroutine that lost its P meanwhile begins a
/// new slice on the one it got. One check of the flag per path, as
/// before (h34 first tested it once after this function, on a returned
/// enum: 8 more instructions per guarded call with tracing off, callgrind).
fn exitsyscallfast(m: &crate::m::M, g: &crate::g::G, oldp: *mut crate::p::P) -> bool {
    // While the world stops, Ps in Syscall belong to the stopper.
    if SCHED.gcwaiting.load(Ordering::Acquire) {
        return false;
    }
    if !oldp.is_null() {
        // SAFETY: Ps are never freed.
        let p = unsafe { &*oldp };
        if p.cas_status(PStatus::Syscall, PStatus::Running) {
            // Nobody retook it: still ours (Go's wirep).
            p.m.set(m as *const _ as *mut _);
            m.p.set(oldp);
            p.syscalltick.fetch_add(1, Ordering::Relaxed);
            if crate::trace::on() {
                crate::trace::syscall_exit(oldp, oldp, true, g.goid.get());
            }
            return true;
        }
    }
    match sched::pidleget_locked() {
        Some(pp) => {
            sched::acquirep(m, pp);
            if crate::trace::on() {
                crate::trace::syscall_exit(oldp, pp, false, g.goid.get());
            }
            true
        }
        None => false,
    }
}

/// Runs `f` as a possibly blocking call: `enter_syscall(); f();
/// exit_syscall()`. Use around std calls that may block the thread (file
/// I/O, `std::sync` waits, DNS) so other goroutines keep their P if it
/// does block. No-op wrapper outside a goroutine. The goroutine may resume
/// on another M (thread) afterwards. A panic in `f` exits the syscall state
/// while unwinding (the guard's drop).
pub fn blocking<F: FnOnce() -> T, T>(f: F) -> T {
    let g = enter_syscall();
    let r = f();
    exit_syscall(g);
    r
}
