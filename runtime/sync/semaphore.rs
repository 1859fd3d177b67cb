//! `Semaphore`: a counting semaphore directly on the runtime's semaphore
//! table (sema.rs; Go's runtime_Semacquire / runtime_Semrelease).

use crate::sema::{cansemacquire, semacquire, semrelease_checked};
use crate::waitreason::WaitReason;
use core::sync::atomic::{AtomicU32, Ordering};

/// A counting semaphore: `acquire` takes a permit, waiting (parking the
/// goroutine, or blocking the thread) while none is available; `release`
/// returns one and wakes the longest waiter. Waiters are queued FIFO, but
/// like Go's runtime semaphore it does not hand permits over: a caller
/// arriving just as a permit is released may take it first.
///
/// A release happens before the acquire that takes its permit. At most
/// `u32::MAX` permits.
///
/// ```
/// let s = goro::sync::Semaphore::new(1);
/// s.acquire();
/// assert!(!s.try_acquire());
/// s.release();
/// assert!(s.try_acquire());
/// ```
pub struct Semaphore {
    /// Available permits (the semaphore word).
    count: AtomicU32,
}

impl Semaphore {
    /// A semaphore with `permits` available permits; usable in a `static`.
    /// Never blocks. Go has no constructor: a `uint32` semaphore word
    /// initialised to `permits` for `runtime_Semacquire`.
    ///
    /// Panics if `permits > u32::MAX` (at compile time in a `const`).
    pub const fn new(permits: usize) -> Semaphore {
        assert!(
            permits <= u32::MAX as usize,
            "goro::sync::Semaphore: more than u32::MAX permits"
        );
        Semaphore {
            count: AtomicU32::new(permits as u32),
        }
    }

    /// Takes a permit, parking the goroutine (blocking the thread) until
    /// one is available. A preemption point, as
    /// [`Mutex::lock`](crate::sync::Mutex::lock). Go's
    /// `runtime_Semacquire`; never panics.
    pub fn acquire(&self) {
        crate::park::preempt_check();
        semacquire(&self.count, false, WaitReason::Semacquire);
    }

    /// Takes a permit if one is available now. Never blocks. Go's
    /// `cansemacquire` (runtime-internal; no exported Go function).
    pub fn try_acquire(&self) -> bool {
        cansemacquire(&self.count)
    }

    /// Returns a permit, waking one waiter if any. Never blocks. Go's
    /// `runtime_Semrelease` (without handoff).
    ///
    /// Panics if that would exceed `u32::MAX` available permits.
    #[track_caller]
    pub fn release(&self) {
        if !semrelease_checked(&self.count, false) {
            panic!("goro::sync::Semaphore::release: more than u32::MAX permits");
        }
    }

    /// Permits available at this instant (a racy snapshot). Never blocks.
    /// No Go counterpart (Go reads the semaphore word directly).
    pub fn available_permits(&self) -> usize {
        // Relaxed: a snapshot for display/heuristics.
        self.count.load(Ordering::Relaxed) as usize
    }
}

impl core::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.available_permits())
            .finish()
    }
}
