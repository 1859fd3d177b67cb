//! Time: `sleep`, `after`, `tick` (Go's time.Sleep, time.After, time.Tick),
//! all built on the per-P timers (timer.rs). Sleeping parks the goroutine,
//! never the OS thread; outside a goroutine these block the calling thread.

use crate::chan::{chan, Receiver};
use crate::g::G;
use crate::timer::Action;
use std::time::{Duration, Instant};

/// Monotonic deadline `d` from now in ns, or None if it overflows (never).
pub(crate) fn deadline_after(d: Duration) -> Option<i64> {
    let ns = i64::try_from(d.as_nanos()).ok()?;
    crate::os::nanotime().checked_add(ns)
}

/// Adds a timer to the current P (or P 0 from a thread without one) and
/// makes sure an M will wake for it (Go's addtimer + wakeNetPoller).
pub(crate) fn add_timer(when: i64, action: Action) {
    crate::ensure_started();
    let _ml = crate::m::MLock::new();
    let pp = crate::park::getp_user();
    let timers = if pp.is_null() {
        &crate::sched::allp(0).timers
    } else {
        // SAFETY: we hold pp.
        unsafe { &(*pp).timers }
    };
    if timers.add(when, action) {
        crate::sched::wake_netpoller(when);
    }
}

fn sleep_commit(gp: *mut G, when: *mut u8) -> bool {
    add_timer(when as usize as i64, Action::Ready(gp));
    true
}

/// Parks the calling goroutine for at least `d` (Go's time.Sleep); other
/// goroutines run on its M meanwhile. Outside a goroutine, sleeps the
/// thread. `Duration::MAX` (or any overflowing duration) parks forever.
pub fn sleep(d: Duration) {
    if d.is_zero() {
        crate::yield_now();
        return;
    }
    if !crate::park::in_goroutine() {
        match deadline_after(d) {
            Some(_) => std::thread::sleep(d),
            None => loop {
                std::thread::park();
            },
        }
        return;
    }
    match deadline_after(d) {
        Some(when) => crate::park::gopark(Some(sleep_commit), when as usize as *mut u8),
        None => loop {
            crate::park::gopark(None, core::ptr::null_mut());
        },
    }
}

/// A channel that receives the current time once, after `d` (Go's
/// time.After). The channel has one buffer slot and is never closed; an
/// overflowing `d` (e.g. `Duration::MAX`) never fires. The timer stays
/// armed until it fires even if the receiver is dropped (as in Go ≤ 1.22).
pub fn after(d: Duration) -> Receiver<Instant> {
    let (tx, rx) = chan(1);
    if let Some(when) = deadline_after(d) {
        add_timer(when, Action::Send { tx, period: 0 });
    } else {
        core::mem::forget(tx); // keep the channel open forever
    }
    rx
}

/// A channel that receives the time every `d` (Go's time.Tick): one buffer
/// slot, first tick after one period, ticks dropped for slow readers. The
/// ticker stops once every Receiver is dropped. A zero `d` is treated as
/// 1 ns; an overflowing `d` never ticks.
pub fn tick(d: Duration) -> Receiver<Instant> {
    let (tx, rx) = chan(1);
    let period = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX).max(1);
    match deadline_after(d) {
        Some(when) => add_timer(when, Action::Send { tx, period }),
        None => core::mem::forget(tx),
    }
    rx
}

/// The current time as seen by the runtime's timers (monotonic).
pub fn now() -> Instant {
    Instant::now()
}
