//! `Mutex<T>`: Go's sync.Mutex (mutex.go) with a std-style guard API.
//!
//! # Mutex fairness (Go's essay, mutex.go)
//!
//! The mutex has two modes, normal and starvation.
//!
//! In normal mode waiters queue FIFO, but a woken waiter does not own the
//! mutex: it competes with newly arriving goroutines, which have the
//! advantage of already running on a CPU (and there can be many of them), so
//! a woken waiter may well lose. It then queues again at the *front* of the
//! queue (`lifo` in sema.rs). A waiter that fails to get the mutex for more
//! than 1 ms switches the mutex to starvation mode.
//!
//! In starvation mode ownership passes directly from the unlocking goroutine
//! to the waiter at the front of the queue (sema handoff). Newcomers neither
//! try to take the mutex, even if it looks unlocked, nor spin: they queue at
//! the tail. The unlocker also yields its P so the new owner runs at once.
//!
//! A waiter that gets the mutex and sees that it is the last waiter, or that
//! it waited less than 1 ms, switches the mutex back to normal mode.
//!
//! Normal mode performs far better (a goroutine can take the mutex many times
//! in a row even with blocked waiters); starvation mode prevents pathological
//! tail latency.
//!
//! # The state word
//!
//! `state`: bit 0 `LOCKED`, bit 1 `WOKEN` (a waiter is awake or spinning and
//! will try to lock: unlockers need not wake another), bit 2 `STARVING`,
//! bits 3.. the number of waiters queued on `sema`. In starvation mode the
//! mutex is owned while `LOCKED` is clear (the handoff is in flight; the new
//! owner sets it).
//!
//! # Spinning
//!
//! Go's sync_runtime_canSpin: a locker spins (4 rounds of 30 PAUSEs) only
//! when it can pay off: more than one CPU and one P, at least one other P
//! running (gomaxprocs > npidle + nmspinning + 1: the holder may be running
//! and about to unlock), and the spinner's own run queue empty (otherwise
//! parking lets those goroutines run). Plain threads, which have no P, spin
//! under the CPU condition alone, like an adaptive futex mutex.

use crate::sema::{semacquire, semrelease};
use crate::waitreason::WaitReason;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

const LOCKED: i32 = 1;
const WOKEN: i32 = 2;
const STARVING: i32 = 4;
const WAITER_SHIFT: u32 = 3;
/// A waiter that waited longer than this (ns) switches to starvation mode.
const STARVATION_THRESHOLD_NS: i64 = 1_000_000;
// Spin rounds before parking and PAUSEs per round: the runtime lock's
// (Go's sync_runtime_canSpin uses lock_futex.go's active_spin too).
use crate::lock_futex::{ACTIVE_SPIN, ACTIVE_SPIN_CNT};

/// Go's sync_runtime_canSpin: whether spin round `iter` may pay off (see
/// "Spinning" above). Any goroutine or thread.
#[inline]
fn can_spin(iter: u32) -> bool {
    if iter >= ACTIVE_SPIN || crate::os::ncpu_cached() <= 1 {
        return false;
    }
    // No P: a plain thread, or a goroutine inside blocking().
    let pp = crate::m::getp();
    if pp.is_null() {
        return true;
    }
    use crate::sched::{gomaxprocs, SCHED};
    // Relaxed: a heuristic on racy counters, as in Go.
    let busy = SCHED.npidle.load(Ordering::Relaxed) + SCHED.nmspinning.load(Ordering::Relaxed) + 1;
    if gomaxprocs() as i32 <= busy {
        return false;
    }
    // SAFETY: Ps are never freed and the run queue's ends are atomics: a
    // P that is no longer ours after a migrating preemption only makes
    // this heuristic stale.
    unsafe { (*pp).runq.is_empty() }
}

/// The lock without data: Go's sync.Mutex. Used by `Mutex<T>`, `RwLock`
/// (writer exclusion) and `Once`.
pub(crate) struct RawMutex {
    /// See "The state word". Acquire on the RMWs that take the mutex,
    /// Release on unlock's; Relaxed loads and CASes are guesses or take
    /// nothing (each access says).
    state: AtomicI32,
    /// Semaphore the waiters sleep on (sema.rs).
    sema: AtomicU32,
}

impl RawMutex {
    pub(crate) const fn new() -> RawMutex {
        RawMutex {
            state: AtomicI32::new(0),
            sema: AtomicU32::new(0),
        }
    }

    /// Go's Mutex.Lock. Parks the goroutine (blocks the thread) until the
    /// mutex is ours.
    #[inline]
    pub(crate) fn lock(&self) {
        crate::park::preempt_check();
        // Fast path: grab an unlocked mutex. Acquire: pairs with the Release
        // of the previous unlock, so its critical section happens before ours.
        if self
            .state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    /// Go's Mutex.TryLock: lock if that needs no waiting. Fails in
    /// starvation mode (the mutex belongs to the queue).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        // Relaxed: only a guess validated by the CAS.
        let old = self.state.load(Ordering::Relaxed);
        if old & (LOCKED | STARVING) != 0 {
            return false;
        }
        // Acquire, as in lock.
        self.state
            .compare_exchange(old, old | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Go's Mutex.lockSlow.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let mut wait_start: i64 = 0;
        let mut starving = false;
        let mut awoke = false;
        let mut iter = 0;
        // Relaxed loads of `state` below are guesses: each decision is
        // committed by a CAS that fails if the guess was stale.
        let mut old = self.state.load(Ordering::Relaxed);
        loop {
            // Do not spin in starvation mode: ownership is handed off to the
            // waiters, so we could not take the mutex anyway.
            if old & (LOCKED | STARVING) == LOCKED && can_spin(iter) {
                // Set WOKEN so that unlock does not wake other waiters while
                // we are about to take the mutex ourselves.
                if !awoke
                    && old & WOKEN == 0
                    && old >> WAITER_SHIFT != 0
                    && self
                        .state
                        .compare_exchange(old, old | WOKEN, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    awoke = true;
                }
                crate::os::procyield(ACTIVE_SPIN_CNT);
                iter += 1;
                // Relaxed: a guess, as above.
                old = self.state.load(Ordering::Relaxed);
                continue;
            }
            let mut new = old;
            // Do not take a starving mutex: newcomers must queue.
            if old & STARVING == 0 {
                new |= LOCKED;
            }
            if old & (LOCKED | STARVING) != 0 {
                new += 1 << WAITER_SHIFT;
            }
            // Switch to starvation mode, but only while the mutex is locked:
            // unlock expects a starving mutex to have waiters.
            if starving && old & LOCKED != 0 {
                new |= STARVING;
            }
            if awoke {
                // We were woken (or set WOKEN while spinning): clear it.
                if new & WOKEN == 0 {
                    crate::throw::throw("sync: inconsistent mutex state");
                }
                new &= !WOKEN;
            }
            // AcqRel: Acquire when this CAS takes the mutex (pairs with the
            // unlocker's Release); Release is free on an RMW and keeps the
            // waiter-count updates ordered with our earlier writes.
            match self
                .state
                .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    if old & (LOCKED | STARVING) == 0 {
                        return; // locked with the CAS
                    }
                    // If we waited before, queue at the front.
                    let queue_lifo = wait_start != 0;
                    if wait_start == 0 {
                        wait_start = crate::os::nanotime();
                    }
                    semacquire(&self.sema, queue_lifo, WaitReason::SyncMutexLock);
                    starving =
                        starving || crate::os::nanotime() - wait_start > STARVATION_THRESHOLD_NS;
                    // Relaxed: a guess, or, when STARVING, the hand-off
                    // that semacquire already ordered after the unlock.
                    old = self.state.load(Ordering::Relaxed);
                    if old & STARVING != 0 {
                        // Ownership was handed to us, but the state is not yet
                        // consistent: LOCKED is clear and we still count as a
                        // waiter. Fix that.
                        if old & (LOCKED | WOKEN) != 0 || old >> WAITER_SHIFT == 0 {
                            crate::throw::throw("sync: inconsistent mutex state");
                        }
                        let mut delta = LOCKED - (1 << WAITER_SHIFT);
                        if !starving || old >> WAITER_SHIFT == 1 {
                            // Exit starvation mode. Critical to do it here,
                            // considering the wait time: starvation mode is so
                            // inefficient that two goroutines could go lock-step
                            // forever once the mutex is in it.
                            delta -= STARVING;
                        }
                        // AcqRel: as the CAS above (the handoff itself was
                        // ordered by the semaphore wake-up).
                        self.state.fetch_add(delta, Ordering::AcqRel);
                        return;
                    }
                    awoke = true;
                    iter = 0;
                }
                Err(cur) => old = cur,
            }
        }
    }

    /// Go's Mutex.Unlock. Never blocks; in starvation mode a goroutine
    /// yields its P to the new owner.
    #[inline]
    pub(crate) fn unlock(&self) {
        // Fast path: drop the lock bit. Release: publishes the critical
        // section to the next locker's Acquire.
        let new = self
            .state
            .fetch_sub(LOCKED, Ordering::Release)
            .wrapping_sub(LOCKED);
        if new != 0 {
            self.unlock_slow(new);
        }
    }

    /// Go's Mutex.unlockSlow.
    #[cold]
    #[inline(never)]
    fn unlock_slow(&self, new: i32) {
        if new.wrapping_add(LOCKED) & LOCKED == 0 {
            crate::throw::throw("sync: unlock of unlocked mutex");
        }
        if new & STARVING == 0 {
            let mut old = new;
            loop {
                // Nobody to wake, or a waiter is already awake (or has taken
                // the mutex), or the mutex went into starvation mode after
                // our unlock (then its next unlocker hands it off): done.
                if old >> WAITER_SHIFT == 0 || old & (LOCKED | WOKEN | STARVING) != 0 {
                    return;
                }
                // Grab the right to wake someone. Relaxed: no data is
                // published by this CAS (the unlock above did that); the
                // semaphore orders the waiter's wake-up.
                let new = (old - (1 << WAITER_SHIFT)) | WOKEN;
                match self
                    .state
                    .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        semrelease(&self.sema, false);
                        return;
                    }
                    Err(cur) => old = cur,
                }
            }
        } else {
            // Starvation mode: hand ownership to the first waiter and yield
            // our time slice to it. LOCKED stays clear (the waiter sets it),
            // but STARVING keeps newcomers away meanwhile.
            semrelease(&self.sema, true);
        }
    }
}

/// A mutual exclusion lock protecting a `T`, with Go's sync.Mutex
/// algorithm: a CAS fast path, brief spinning only when it can pay off,
/// parking of the waiting goroutine (blocking of a waiting plain thread)
/// otherwise, and starvation mode after a waiter has waited more than 1 ms
/// (direct handoff to the oldest waiter). See the module essay.
///
/// Differences from `std::sync::Mutex`: no poisoning (a panic while the
/// lock is held unlocks it), so `lock` returns the guard and `try_lock` an
/// `Option` rather than `Result`s; the guard may be sent to and dropped by
/// another goroutine or thread; `const fn new`. Not reentrant: locking
/// twice from the same goroutine deadlocks it.
///
/// ```
/// let m = std::sync::Arc::new(goro::sync::Mutex::new(0));
/// let m2 = m.clone();
/// goro::run(move || {
///     let hs: Vec<_> = (0..4).map(|_| { let m = m2.clone(); goro::go!(move || *m.lock() += 1) }).collect();
///     for h in hs { h.join().unwrap(); }
/// });
/// assert_eq!(*m.lock(), 4);
/// ```
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands out access to `T` to one holder at a time, from
// any thread, so T must be Send (as for std's Mutex); no T: Sync needed.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

// Like std's Mutex, usable across `catch_unwind`. std backs this with lock
// poisoning; goro follows Go and does not poison (a guard dropped during a
// panic unlocks normally), so after a caught panic `T` may be in whatever
// state the panicking holder left it, as in Go.
impl<T: ?Sized> std::panic::UnwindSafe for Mutex<T> {}
impl<T: ?Sized> std::panic::RefUnwindSafe for Mutex<T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`; usable in a `static`. Never
    /// blocks. Go's zero `sync.Mutex` (with the data beside it).
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            raw: RawMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex and returns the value (no locking needed). Never
    /// blocks. No Go counterpart (Go's Mutex holds no data).
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex (Go's Mutex.Lock): returns at once if it is free,
    /// else spins briefly when that can pay off, then parks the calling
    /// goroutine (or blocks the calling OS thread) until it is its turn.
    /// The lock is released when the guard is dropped.
    ///
    /// A preemption point, even when the mutex is free: a goroutine that
    /// sysmon asked to yield (it ran a whole time slice while others
    /// wait) yields here, before taking the lock, rather than being
    /// stopped by a signal inside its critical section
    /// (docs/PREEMPTION.md). It may then resume on another thread.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard {
            mutex: self,
            _marker: PhantomData,
        }
    }

    /// Locks the mutex if that needs no waiting (Go's Mutex.TryLock); None
    /// if it is held, or in starvation mode (it then belongs to the
    /// waiters). Never blocks.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        if self.raw.try_lock() {
            Some(MutexGuard {
                mutex: self,
                _marker: PhantomData,
            })
        } else {
            None
        }
    }

    /// Test hook, not API: whether the mutex is in starvation mode (racy
    /// snapshot of the STARVING bit).
    #[doc(hidden)]
    pub fn __is_starving(&self) -> bool {
        // Relaxed: a snapshot for tests; no data is published through it.
        self.raw.state.load(Ordering::Relaxed) & STARVING != 0
    }

    /// Test hook, not API: the whole state word (LOCKED, WOKEN, STARVING
    /// and the waiter count; see "The state word"), 0 for a mutex nobody
    /// holds, waits for or is waking. Racy snapshot.
    #[doc(hidden)]
    pub fn __state(&self) -> i32 {
        // Relaxed: a snapshot for tests; no data is published through it.
        self.raw.state.load(Ordering::Relaxed)
    }

    /// Mutable access without locking: `&mut self` proves no one else can
    /// hold the lock. Never blocks. No Go counterpart.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Mutex<T> {
        Mutex::new(value)
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Some(g) => d.field("data", &&*g),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish_non_exhaustive()
    }
}

/// Proof of holding a [`Mutex`]; derefs to the data and unlocks on drop.
///
/// Unlike std's guard it may be sent to (and dropped by) another goroutine
/// or thread when `T: Send`: a Go mutex is not owned by a goroutine.
///
/// Dropping it is a switch point while the mutex is in starvation mode (a
/// waiter has waited more than 1 ms): the unlocking goroutine hands the
/// mutex to that waiter and yields to it, as Go's `Unlock` does, and may
/// then go on on another thread. Do not hold thread-affine state (a
/// `thread_local!` borrow, std's stdout lock, a `tracing` span) across
/// the drop. h44: four goroutines holding one mutex for 500 µs each at
/// GOMAXPROCS=2 changed thread at 1,150 of 1,200 drops.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized> {
    pub(super) mutex: &'a Mutex<T>,
    /// Send iff T: Send, Sync iff T: Sync (as for `&mut T`).
    _marker: PhantomData<&'a mut T>,
}

// Like std's guard, which may be moved into `catch_unwind`; std backs
// this with poisoning, goro with Go's rule that a panic leaves the data as
// the holder left it (see the note on `Mutex`). `_marker`'s `&mut T`
// made it !UnwindSafe before h43.
impl<T: ?Sized> std::panic::UnwindSafe for MutexGuard<'_, T> {}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held, and &mut self that we
        // are its only user.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.mutex.raw.unlock();
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + core::fmt::Display> core::fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}
