//! `WaitGroup`: Go's sync.WaitGroup (waitgroup.go).
//!
//! One 64-bit word holds the counter (high 32 bits, signed) and the number
//! of waiters (low 32 bits), so `add` and `wait` agree on both with single
//! atomic operations. The goroutine whose `add`/`done` brings the counter to
//! zero while waiters exist resets the word and releases the semaphore once
//! per waiter.

use crate::sema::{semacquire, semrelease};
use crate::waitreason::WaitReason;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

struct Inner {
    /// Counter << 32 | waiters.
    state: AtomicU64,
    /// Semaphore the waiters sleep on.
    sema: AtomicU32,
}

/// Waits for a collection of goroutines (or threads) to finish: Go's
/// sync.WaitGroup. `add` raises the counter, `done` lowers it, `wait`
/// blocks until it is zero.
///
/// Clones share one counter (clone it into each goroutine instead of
/// borrowing). As in Go, `add` with a positive count while the counter is
/// zero must happen before `wait`; a group may be reused once every
/// `wait` of the previous round has returned.
///
/// ```
/// let wg = goro::sync::WaitGroup::new();
/// goro::run(move || {
///     for _ in 0..8 {
///         wg.add(1);
///         let wg = wg.clone();
///         goro::go!(move || wg.done());
///     }
///     wg.wait();
/// });
/// ```
#[derive(Clone)]
pub struct WaitGroup {
    inner: Arc<Inner>,
}

impl WaitGroup {
    /// A group with counter 0 (one small allocation; never blocks). Go's
    /// zero `sync.WaitGroup`.
    pub fn new() -> WaitGroup {
        WaitGroup {
            inner: Arc::new(Inner {
                state: AtomicU64::new(0),
                sema: AtomicU32::new(0),
            }),
        }
    }

    /// Adds `n` to the counter (Go's WaitGroup.Add with a positive delta).
    /// Never blocks.
    ///
    /// Panics if the counter would exceed `i32::MAX`, or if `add` races with
    /// a `wait` on a zero counter (Go's "Add called concurrently with Wait").
    #[track_caller]
    pub fn add(&self, n: usize) {
        match i32::try_from(n) {
            Ok(d) => self.add_delta(d),
            Err(_) => panic!("goro::sync::WaitGroup::add({n}): the counter is limited to i32::MAX"),
        }
    }

    /// Subtracts one from the counter (Go's WaitGroup.Done), releasing all
    /// waiters when it reaches zero. Never blocks.
    ///
    /// Panics with "negative WaitGroup counter" if the counter is already
    /// zero (more `done` calls than added), leaving the counter at zero.
    /// A misuse is applied and then undone (one atomic add each way, as
    /// Go's single add): a legitimate `done` that runs inside the window
    /// of another's `add` past `i32::MAX` may take the blame and panic
    /// (h29). Checking first in a CAS loop closes that window but made
    /// `add`/`done` pairs 2x slower (25 ns against 11, Go 11–14).
    #[track_caller]
    pub fn done(&self) {
        self.add_delta(-1);
    }

    /// Go's WaitGroup.Add.
    #[track_caller]
    fn add_delta(&self, delta: i32) {
        let st = &self.inner.state;
        let d = (delta as i64 as u64) << 32;
        // AcqRel: Release publishes the caller's work to whoever sees the
        // counter reach zero (a waiter's Acquire load, or the last adder);
        // Acquire lets the adder that reaches zero pass everyone's work on
        // to the waiters it wakes (through the semaphore).
        let state = st.fetch_add(d, Ordering::AcqRel).wrapping_add(d);
        let v = (state >> 32) as i32;
        let w = state as u32;
        if v < 0 {
            // Undo, so the group stays usable after the caught panic.
            // Until the undo, the counter reads negative: `wait` lets
            // such a window pass rather than register (h29). Relaxed:
            // nothing is published with an undone add.
            st.fetch_sub(d, Ordering::Relaxed);
            if delta > 0 {
                panic!("goro::sync::WaitGroup::add: counter overflow (more than i32::MAX)");
            }
            panic!("goro::sync::WaitGroup::done called more times than add: negative WaitGroup counter");
        }
        if w != 0 && delta > 0 && v == delta {
            panic!("goro::sync::WaitGroup misuse: add called concurrently with wait");
        }
        if v > 0 || w == 0 {
            return;
        }
        // We brought the counter to zero with waiters present. No state
        // change can race now: adds must not run concurrently with wait,
        // and wait does not register while the counter is zero. Still do
        // Go's cheap misuse check. Relaxed: we are the only writer now.
        if st.load(Ordering::Relaxed) != state {
            panic!("goro::sync::WaitGroup misuse: add called concurrently with wait");
        }
        // Reset the waiter count. Relaxed: each waiter reads it only after
        // its semaphore wake-up, which orders this store first.
        st.store(0, Ordering::Relaxed);
        for _ in 0..w {
            semrelease(&self.inner.sema, false);
        }
    }

    /// Blocks until the counter is zero (Go's WaitGroup.Wait): returns at
    /// once if it is, else parks the goroutine (or blocks the thread).
    ///
    /// Panics if the group is reused (a new `add`) before this wait has
    /// returned (Go's check).
    #[track_caller]
    pub fn wait(&self) {
        let st = &self.inner.state;
        loop {
            // Acquire: pairs with the Release of the add/done calls that
            // brought the counter to zero.
            let state = st.load(Ordering::Acquire);
            let v = (state >> 32) as i32;
            if v == 0 {
                return;
            }
            if v < 0 {
                // A misused `done` (or an `add` past i32::MAX) is in the
                // window before its undo: registering now would leave us
                // asleep on the counter the undo restores, zero (h29).
                // Let it finish.
                if crate::park::parkable_g().is_null() {
                    std::thread::yield_now();
                } else {
                    crate::yield_now();
                }
                continue;
            }
            // Register as a waiter. Relaxed: ordering with the done calls
            // comes from the semaphore wake-up below.
            if st
                .compare_exchange(state, state + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                semacquire(&self.inner.sema, false, WaitReason::SyncWaitGroupWait);
                // Relaxed: the wake-up ordered the reset before this load.
                if st.load(Ordering::Relaxed) != 0 {
                    panic!("goro::sync::WaitGroup is reused before the previous wait has returned");
                }
                return;
            }
        }
    }
}

impl Default for WaitGroup {
    fn default() -> WaitGroup {
        WaitGroup::new()
    }
}

impl core::fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Relaxed: a racy snapshot for display.
        let state = self.inner.state.load(Ordering::Relaxed);
        f.debug_struct("WaitGroup")
            .field("counter", &((state >> 32) as i32))
            .field("waiters", &(state as u32))
            .finish()
    }
}
