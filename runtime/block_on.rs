//! `goro::block_on`: run a `Future` to completion inside the current
//! goroutine (or OS thread), so runtime-agnostic async code (futures
//! channels, async-channel, ...) can be awaited from goroutines.
//!
//! # The state word
//!
//! One `AtomicU32` per `block_on` call, shared (through an `Arc`) with every
//! `Waker` cloned from it:
//!
//! ```text
//!   POLLING  --wake-->  NOTIFIED            (woken during poll: poll again)
//!   POLLING  --park-->  PARKED              (Pending, nothing woke us)
//!   PARKED   --wake-->  NOTIFIED + goready  (exactly one waker readies)
//!   NOTIFIED --resume-> POLLING             (the poller, before polling)
//!   any      --Ready--> DONE                (wakes are no-ops from now on)
//! ```
//!
//! Race analysis. Only the poller moves POLLING->PARKED, NOTIFIED->POLLING
//! and ->DONE; only wakers move POLLING->NOTIFIED and PARKED->NOTIFIED.
//! - Wake during poll (also from inside `poll`, before Pending is returned):
//!   the waker turns POLLING into NOTIFIED; the poller's POLLING->PARKED CAS
//!   then fails, and it polls again without parking. No wake-up is lost.
//! - Wake after the poller parked: the CAS PARKED->NOTIFIED succeeds for
//!   exactly one waker, which alone calls `goready` (or futex-wakes the
//!   thread); any other concurrent waker sees NOTIFIED and does nothing, so
//!   the G is never readied twice. The poller publishes PARKED only from
//!   gopark's unlock function, on g0, after the G's status is Waiting, so
//!   the winning waker always finds a parked G (Go's gopark contract).
//! - Several wakes while NOTIFIED: each is an RMW on the word (a CAS
//!   NOTIFIED->NOTIFIED with Release), so the poller's Acquire swap to
//!   POLLING synchronises with every waker whose wake it absorbed, and the
//!   next poll sees what they published before waking.
//! - Wake after completion: the word is DONE forever (the `Arc` keeps it
//!   alive as long as any waker), so late wakes, clones and drops on any
//!   thread are no-ops; the G pointer is never touched after DONE (it may
//!   already run another goroutine).
//!
//! Outside a goroutine (or inside `enter_syscall`/`blocking`, where a G
//! may not park) the poller waits with a futex on the state word itself,
//! like `futures::executor::block_on`.

use crate::g::G;
use crate::park;
use crate::waitreason::WaitReason;
use core::future::Future;
use core::pin::pin;
use core::sync::atomic::{AtomicU32, Ordering};
use core::task::{Context, Poll, Waker};
use std::sync::Arc;
use std::task::Wake;

const POLLING: u32 = 0;
const NOTIFIED: u32 = 1;
const PARKED: u32 = 2;
const DONE: u32 = 3;

/// What the wakers share with the poller.
struct Signal {
    /// The state word (module docs). Also the futex word of a thread poller.
    /// Successful RMWs are AcqRel, loads and failed CASes Acquire, and
    /// DONE's store Release (each access says why).
    state: AtomicU32,
    /// The polling G as usize, or 0 for a thread poller. Immutable.
    g: usize,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Acquire on load/failure: only to read a fresh value for the CAS
        // loop; the Release half of each successful RMW publishes the
        // waker's prior writes to the poller (module docs).
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let next = match s {
                POLLING | NOTIFIED => NOTIFIED,
                PARKED => NOTIFIED,
                _ => return, // DONE: a late wake, no-op.
            };
            match self
                .state
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(cur) => s = cur,
            }
        }
        if s == PARKED {
            // We won PARKED->NOTIFIED: we alone ready the poller.
            if self.g != 0 {
                park::goready(self.g as *mut G);
            } else {
                crate::os::futex_wake(&self.state, 1);
            }
        }
    }
}

/// gopark unlock function: publish PARKED now that the G is Waiting; fail
/// (resume at once) if a waker got in first.
fn park_commit(_gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg is the Signal the parked G holds an Arc to.
    let sig = unsafe { &*(arg as *const Signal) };
    // AcqRel: Release publishes PARKED for the waker that will ready us;
    // Acquire (also on failure) takes the writes of a waker that won.
    sig.state
        .compare_exchange(POLLING, PARKED, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Runs `fut` to completion on the calling goroutine and returns its
/// output. While the future is Pending the goroutine parks (its P runs
/// other goroutines); the future's `Waker` readies it from any thread,
/// any number of times, also after `block_on` returned (then a no-op).
/// On a plain OS thread (or inside [`crate::enter_syscall`] /
/// [`crate::blocking`]) it blocks the thread instead, like
/// `futures::executor::block_on`.
///
/// Blocking: until the future is Ready. A goroutine parked here is shown
/// with wait reason `future wait` by [`crate::dump`]; the deadlock
/// detector treats it as wakeable (a waker may live anywhere).
///
/// Go has no counterpart (Go has no futures); it is the async analogue of
/// a channel receive. Panics raised by `poll` propagate to the caller.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let gp = park::parkable_g();
    let sig = Arc::new(Signal {
        state: AtomicU32::new(POLLING),
        g: gp as usize,
    });
    let waker = Waker::from(sig.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        crate::park::preempt_check();
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            // Release: nothing to publish really; wakers only need to see
            // DONE eventually, and any value they see is handled.
            sig.state.store(DONE, Ordering::Release);
            return v;
        }
        if !gp.is_null() && park::parkable_g() == gp {
            park::gopark(
                Some(park_commit),
                Arc::as_ptr(&sig) as *mut u8,
                WaitReason::FutureWait,
            );
        } else {
            // Thread poller: publish PARKED, then sleep while it stays so.
            // A G that entered a syscall inside poll lands here too, with
            // sig.g set: wakers then goready a G that is not Waiting. Avoid
            // that by never publishing PARKED for such a G: spin-yield.
            // The CAS and the load: orderings as in park_commit (the load's
            // Acquire pairs with the winning waker's Release).
            if sig.g != 0 {
                crate::os::osyield();
            } else if sig
                .state
                .compare_exchange(POLLING, PARKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                while sig.state.load(Ordering::Acquire) == PARKED {
                    crate::os::futex_wait(&sig.state, PARKED, None);
                }
            }
        }
        // Acquire: synchronises with every waker whose wake we absorb.
        sig.state.swap(POLLING, Ordering::AcqRel);
    }
}
