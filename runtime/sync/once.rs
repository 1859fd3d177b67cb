//! `Once`: Go's sync.Once (once.go).

use super::mutex::RawMutex;
use core::sync::atomic::{AtomicU32, Ordering};

/// Runs a function exactly once: Go's sync.Once. Concurrent callers wait
/// (park, or block their thread) until the first call has returned.
///
/// A panicking function counts as done, as in Go: later calls return at
/// once without running theirs, and there is no poisoning (std's `Once`
/// would poison instead).
///
/// ```
/// static INIT: goro::sync::Once = goro::sync::Once::new();
/// INIT.call_once(|| println!("once"));
/// INIT.call_once(|| unreachable!());
/// ```
pub struct Once {
    /// 1 once the function has returned (or unwound). Checked first: the
    /// hot path is a single Acquire load.
    done: AtomicU32,
    /// Serialises the slow path.
    m: RawMutex,
}

impl Once {
    /// A Once that has not run yet; usable in a `static`. Never blocks.
    /// Go's zero `sync.Once`.
    pub const fn new() -> Once {
        Once {
            done: AtomicU32::new(0),
            m: RawMutex::new(),
        }
    }

    /// Calls `f` if no call on this Once has run yet (Go's Once.Do). If a
    /// call is in progress, waits until it returns (parks the goroutine,
    /// or blocks the thread). When this returns, the first call's `f` has
    /// returned or panicked, and its effects are visible. Calling it again
    /// from inside `f` deadlocks (as in Go).
    pub fn call_once<F: FnOnce()>(&self, f: F) {
        // Acquire: pairs with the Release store in `do_slow`, so f's effects
        // are visible to every caller that sees done == 1.
        if self.done.load(Ordering::Acquire) == 0 {
            self.do_slow(f);
        }
    }

    /// Whether a call has completed (returned or panicked); if true, its
    /// effects are visible. Never blocks. No Go counterpart (Go's Once
    /// has no query).
    pub fn is_completed(&self) -> bool {
        self.done.load(Ordering::Acquire) != 0
    }

    #[cold]
    #[inline(never)]
    fn do_slow<F: FnOnce()>(&self, f: F) {
        /// Unlocks the mutex and, when set, marks the Once done, also when
        /// `f` unwinds (Go's two defers).
        struct Finish<'a> {
            once: &'a Once,
            ran: bool,
        }
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                if self.ran {
                    // Release: publishes f's effects (see call_once).
                    self.once.done.store(1, Ordering::Release);
                }
                self.once.m.unlock();
            }
        }
        self.m.lock();
        let mut fin = Finish {
            once: self,
            ran: false,
        };
        // Relaxed: under the mutex, which orders this with the last store.
        if self.done.load(Ordering::Relaxed) == 0 {
            fin.ran = true;
            f();
        }
    }
}

impl Default for Once {
    fn default() -> Once {
        Once::new()
    }
}

impl core::fmt::Debug for Once {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Once")
            .field("done", &self.is_completed())
            .finish()
    }
}
