//! Blocking system calls: `enter_syscall` / `exit_syscall` / `blocking`.
//! Go's entersyscallblock / exitsyscall (proc.go).
//!
//! goro hands the P off at entry (Go's entersyscallblock, used for calls
//! known to block) rather than waiting for sysmon to retake it: a user who
//! marks a call as blocking is telling us it blocks. At exit the M takes any
//! idle P (fast path); if none is idle, the G goes on the global queue and
//! the M sleeps (exitsyscall0).

use crate::g::GStatus;
use crate::m::getm;
use crate::sched::{self, SCHED};
use core::sync::atomic::Ordering;

/// Proof of `enter_syscall`; `exit_syscall(guard)` or dropping it returns
/// the goroutine to the scheduler. Not Send: exit must happen on the same
/// goroutine (and so the same M).
#[must_use = "dropping the guard immediately exits the syscall"]
pub struct SyscallGuard {
    active: bool,
    _not_send: core::marker::PhantomData<*mut ()>,
}

/// Go's entersyscall (block variant): the calling goroutine is about to
/// block its OS thread; its P is handed to another M so other goroutines
/// keep running. Outside a goroutine, or nested inside another
/// `enter_syscall`, this is a no-op.
pub fn enter_syscall() -> SyscallGuard {
    // Nested inside another enter_syscall (no P): nothing to hand off.
    let gp = crate::park::parkable_g();
    if gp.is_null() {
        return SyscallGuard {
            active: false,
            _not_send: core::marker::PhantomData,
        };
    }
    // SAFETY: on a user G: this thread's M and its running G.
    let (m, g) = unsafe { (&*getm(), &*gp) };
    g.cas_status(GStatus::Running, GStatus::Syscall);
    let pp = sched::releasep(m);
    // SAFETY: pp was ours.
    unsafe { (*pp).syscalltick.fetch_add(1, Ordering::Relaxed) };
    m.oldp.set(pp);
    crate::sysmon::HANDOFFS.fetch_add(1, Ordering::Relaxed); // statistics only
    sched::handoffp(pp);
    SyscallGuard {
        active: true,
        _not_send: core::marker::PhantomData,
    }
}

/// Go's exitsyscall: reacquire a P (any idle one), or queue the goroutine
/// globally and park the M until one is free. Consumes the guard.
pub fn exit_syscall(mut guard: SyscallGuard) {
    guard.exit();
}

impl SyscallGuard {
    fn exit(&mut self) {
        if !self.active {
            return;
        }
        self.active = false;
        // SAFETY: same G and M as at entry (the guard is !Send).
        let (m, g) = unsafe { (&*getm(), &*crate::m::getg()) };
        m.oldp.set(core::ptr::null_mut());
        if !SCHED.gcwaiting.load(Ordering::Acquire) {
            if let Some(pp) = sched::pidleget_locked() {
                sched::acquirep(m, pp);
                g.cas_status(GStatus::Syscall, GStatus::Running);
                return;
            }
        }
        crate::park::exitsyscall_slow();
    }
}

impl Drop for SyscallGuard {
    fn drop(&mut self) {
        self.exit();
    }
}

/// Runs `f` as a blocking call: `enter_syscall(); f(); exit_syscall()`.
/// Use around std calls that block the thread (file I/O, `std::sync`
/// waits, DNS) so other goroutines keep their P. No-op wrapper outside a
/// goroutine. The goroutine may resume on another M (thread) afterwards.
pub fn blocking<F: FnOnce() -> T, T>(f: F) -> T {
    let g = enter_syscall();
    let r = f();
    exit_syscall(g);
    r
}

impl core::fmt::Debug for SyscallGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SyscallGuard")
            .field("active", &self.active)
            .finish()
    }
}
