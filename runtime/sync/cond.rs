//! `Cond`: Go's sync.Cond (cond.go) over the runtime's notify list
//! (sema.rs), used with [`Mutex`](super::Mutex) guards.

use super::mutex::MutexGuard;
use crate::sema::NotifyList;

/// A condition variable: Go's sync.Cond, for goro's [`Mutex`](super::Mutex).
///
/// `wait` takes a ticket, unlocks the mutex, parks until that ticket is
/// notified and locks the mutex again. `notify_one` wakes the waiter that
/// has waited longest (first in, first out by the order of their `wait`
/// calls); `notify_all` wakes every current waiter. A notification with no
/// waiter is not remembered. Waiters may be goroutines (parked) or plain
/// threads (blocked); one `Cond` may be used with several mutexes, though
/// one condition normally goes with one mutex.
///
/// As with any condition variable, re-check the condition in a loop after
/// waking: another goroutine may have changed it before the mutex was
/// re-acquired ([`Cond::wait_while`] does that).
///
/// ```
/// use std::sync::Arc;
/// use goro::sync::{Cond, Mutex};
/// let pair = Arc::new((Mutex::new(false), Cond::new()));
/// let p2 = pair.clone();
/// goro::run(move || {
///     let h = goro::go!(move || { *p2.0.lock() = true; p2.1.notify_all(); });
///     let (m, c) = &*pair;
///     let _ready = c.wait_while(m.lock(), |ready| !*ready);
///     drop(_ready);
///     h.join().unwrap();
/// });
/// ```
pub struct Cond {
    notify: NotifyList,
}

// Like std's Condvar, usable across `catch_unwind` (`catch_unwind(||
// c.notify_all())` compiles). The notify list's cells are only touched
// under its lock, for a few pointer operations that cannot panic, so a
// panic never leaves it half-updated; a waiter that unwinds is never
// listed (it unwinds before `wait` queues it or after it was unlinked).
// Before h43 the list's UnsafeCell made Cond neither.
impl std::panic::UnwindSafe for Cond {}
impl std::panic::RefUnwindSafe for Cond {}

impl Cond {
    /// A condition variable with no waiters; usable in a `static`. Never
    /// blocks. Go's `sync.NewCond(l)`, without `l`: each `wait` is given
    /// the guard of the mutex it releases.
    pub const fn new() -> Cond {
        Cond {
            notify: NotifyList::new(),
        }
    }

    /// Go's Cond.Wait: atomically with respect to notifications, unlocks
    /// the guard's mutex and parks the goroutine (blocks the thread) until
    /// `notify_one`/`notify_all` wakes it; then locks the mutex again and
    /// returns the new guard. A notification sent after this call unlocked
    /// the mutex is never missed.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let mutex = guard.mutex;
        // Take the ticket while still holding the mutex: any notifier that
        // runs after we unlock will see it.
        let t = self.notify.add();
        drop(guard);
        self.notify.wait(t);
        mutex.lock()
    }

    /// Waits (as [`Cond::wait`]) while `condition` returns true; returns
    /// the guard with the condition false. Parks the goroutine (blocks the
    /// thread) in each wait. If `condition` panics, the guard is dropped
    /// (the mutex unlocked) and the panic propagates. Go's idiom
    /// `for cond() { c.Wait() }`; no Go function.
    pub fn wait_while<'a, T: ?Sized, F: FnMut(&mut T) -> bool>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: F,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Go's Cond.Signal: wakes the longest-waiting waiter, if any. Holding
    /// the mutex is allowed but not required. Never blocks.
    pub fn notify_one(&self) {
        self.notify.notify_one();
    }

    /// Go's Cond.Broadcast: wakes every current waiter. Holding the mutex
    /// is allowed but not required. Never blocks.
    pub fn notify_all(&self) {
        self.notify.notify_all();
    }
}

impl Default for Cond {
    fn default() -> Cond {
        Cond::new()
    }
}

impl core::fmt::Debug for Cond {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cond").finish_non_exhaustive()
    }
}
