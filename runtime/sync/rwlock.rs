//! `RwLock<T>`: Go's sync.RWMutex (rwmutex.go) with std-style guards.
//!
//! # Protocol (Go's)
//!
//! `reader_count` counts readers holding or waiting for the lock. A writer
//! first takes `w` (excluding other writers), then announces itself by
//! subtracting `MAX_READERS` from `reader_count`: from then on every new
//! reader sees a negative count and sleeps on `reader_sem`, so a pending
//! writer blocks new readers and writers are not starved. The readers that
//! were already inside (the count the writer's subtraction returned) are
//! added to `reader_wait`; each of them, on unlocking, sees the negative
//! count and decrements `reader_wait`; the one that brings it to zero wakes
//! the writer on `writer_sem`. Unlocking the writer adds `MAX_READERS`
//! back, releases exactly the readers that queued meanwhile, then unlocks `w`.
//!
//! All counters are updated with read-modify-writes on one word each, so
//! their per-word modification order alone decides who waits for whom; the
//! orderings only have to carry the critical sections (Acquire on taking,
//! Release on giving up, AcqRel where one RMW does both).

use super::mutex::RawMutex;
use crate::sema::{semacquire, semrelease};
use crate::waitreason::WaitReason;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Maximum number of concurrent readers (Go's rwmutexMaxReaders).
const MAX_READERS: i32 = 1 << 30;

/// A reader-writer lock protecting a `T`, with Go's sync.RWMutex
/// algorithm: any number of readers or one writer; once a writer is
/// waiting, new readers wait behind it, so writers are not starved. Waiting
/// parks the goroutine (blocks a plain OS thread).
///
/// No poisoning; guards may be sent to another goroutine or thread. Not
/// reentrant: a goroutine that holds a read lock and asks for another may
/// deadlock if a writer is waiting in between (as in Go). At most 2^30 - 1
/// concurrent readers.
pub struct RwLock<T: ?Sized> {
    /// Held by a writer (and by pending writers in turn).
    w: RawMutex,
    /// Semaphore a writer waits on for departing readers.
    writer_sem: AtomicU32,
    /// Semaphore readers wait on for a writer to finish.
    reader_sem: AtomicU32,
    /// Readers in or waiting; minus MAX_READERS while a writer is pending.
    /// Acquire on the RMWs that take the lock, Release on those that leave
    /// it (each access says which it pairs with).
    reader_count: AtomicI32,
    /// Readers the pending writer still waits for. AcqRel RMWs: the
    /// departing readers' releases reach the writer through this word (its
    /// own fetch_add, or the last reader's semrelease).
    reader_wait: AtomicI32,
    data: UnsafeCell<T>,
}

// SAFETY: a writer gets `&mut T` from any thread (needs T: Send), readers
// share `&T` across threads (needs T: Sync), as for std's RwLock.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

// Like std's RwLock, usable across `catch_unwind`; no poisoning (Go), see
// the note on `Mutex`.
impl<T: ?Sized> std::panic::UnwindSafe for RwLock<T> {}
impl<T: ?Sized> std::panic::RefUnwindSafe for RwLock<T> {}

impl<T> RwLock<T> {
    /// An unlocked lock holding `value`; usable in a `static`. Never
    /// blocks. Go's zero `sync.RWMutex` (with the data beside it).
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            w: RawMutex::new(),
            writer_sem: AtomicU32::new(0),
            reader_sem: AtomicU32::new(0),
            reader_count: AtomicI32::new(0),
            reader_wait: AtomicI32::new(0),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock and returns the value (no locking needed). Never
    /// blocks. No Go counterpart (Go's RWMutex holds no data).
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes a shared read lock (Go's RWMutex.RLock): returns at once unless
    /// a writer holds or waits for the lock; then parks the goroutine (or
    /// blocks the thread) until that writer is done. A preemption point,
    /// as [`Mutex::lock`](crate::sync::Mutex::lock).
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        crate::park::preempt_check();
        // Acquire: pairs with the Release of the last writer's unlock.
        if self.reader_count.fetch_add(1, Ordering::Acquire) + 1 < 0 {
            // A writer is pending: wait for it. Its unlock releases us.
            semacquire(&self.reader_sem, false, WaitReason::SyncRWMutexRLock);
        }
        RwLockReadGuard {
            lock: self,
            _marker: PhantomData,
        }
    }

    /// Takes a read lock if no writer holds or waits for it (Go's
    /// RWMutex.TryRLock). Never blocks.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        // Relaxed: a guess validated by the CAS.
        let mut c = self.reader_count.load(Ordering::Relaxed);
        loop {
            if c < 0 {
                return None;
            }
            // Acquire, as in read.
            match self.reader_count.compare_exchange_weak(
                c,
                c + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(RwLockReadGuard {
                        lock: self,
                        _marker: PhantomData,
                    })
                }
                Err(cur) => c = cur,
            }
        }
    }

    /// Go's RWMutex.RUnlock.
    #[inline]
    fn read_unlock(&self) {
        // Release: our reads happen before the next writer's Acquire.
        let r = self.reader_count.fetch_sub(1, Ordering::Release) - 1;
        if r < 0 {
            self.read_unlock_slow(r);
        }
    }

    /// Go's RWMutex.rUnlockSlow: a writer is pending.
    #[cold]
    #[inline(never)]
    fn read_unlock_slow(&self, r: i32) {
        if r + 1 == 0 || r + 1 == -MAX_READERS {
            crate::throw::throw("sync: RUnlock of unlocked RWMutex");
        }
        // The last departing reader wakes the writer. AcqRel: a chain of
        // readers' releases reaches the writer through this word.
        if self.reader_wait.fetch_sub(1, Ordering::AcqRel) - 1 == 0 {
            semrelease(&self.writer_sem, false);
        }
    }

    /// Takes the exclusive write lock (Go's RWMutex.Lock): waits for other
    /// writers, then blocks new readers and waits for the current ones to
    /// leave. Parks the goroutine (or blocks the thread) while waiting. A
    /// preemption point, as [`Mutex::lock`](crate::sync::Mutex::lock).
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        // First, resolve competition with other writers.
        self.w.lock();
        // Announce to readers there is a pending writer. AcqRel: Acquire
        // takes the releases of readers that left before; Release is free.
        let r = self.reader_count.fetch_sub(MAX_READERS, Ordering::AcqRel);
        // Wait for active readers.
        if r != 0 && self.reader_wait.fetch_add(r, Ordering::AcqRel) + r != 0 {
            semacquire(&self.writer_sem, false, WaitReason::SyncRWMutexLock);
        }
        RwLockWriteGuard {
            lock: self,
            _marker: PhantomData,
        }
    }

    /// Takes the write lock if it is entirely free (Go's RWMutex.TryLock).
    /// Never blocks.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        if !self.w.try_lock() {
            return None;
        }
        // Acquire: pairs with the last reader's Release.
        if self
            .reader_count
            .compare_exchange(0, -MAX_READERS, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.w.unlock();
            return None;
        }
        Some(RwLockWriteGuard {
            lock: self,
            _marker: PhantomData,
        })
    }

    /// Go's RWMutex.Unlock.
    fn write_unlock(&self) {
        // Announce to readers there is no active writer. Release: publishes
        // our writes to the readers that enter after this.
        let r = self.reader_count.fetch_add(MAX_READERS, Ordering::Release) + MAX_READERS;
        if r >= MAX_READERS {
            crate::throw::throw("sync: Unlock of unlocked RWMutex");
        }
        // Unblock the readers that queued while we held the lock.
        for _ in 0..r {
            semrelease(&self.reader_sem, false);
        }
        // Allow other writers to proceed.
        self.w.unlock();
    }

    /// Mutable access without locking (`&mut self` proves exclusivity).
    /// Never blocks. No Go counterpart.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> RwLock<T> {
        RwLock::new(T::default())
    }
}

impl<T> From<T> for RwLock<T> {
    fn from(value: T) -> RwLock<T> {
        RwLock::new(value)
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Some(g) => d.field("data", &&*g),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish_non_exhaustive()
    }
}

/// Shared access to an [`RwLock`]'s data; releases the read lock on drop.
/// May be sent to another goroutine or thread when `T: Send + Sync`.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    /// With `lock`: Send and Sync iff T: Send + Sync.
    _marker: PhantomData<&'a T>,
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves a read lock is held: no writer exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.read_unlock();
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + core::fmt::Display> core::fmt::Display for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

/// Exclusive access to an [`RwLock`]'s data; releases the write lock on
/// drop. May be sent to another goroutine or thread when `T: Send + Sync`.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    /// With `lock`: Send and Sync iff T: Send + Sync.
    _marker: PhantomData<&'a mut T>,
}

// Like std's guard, which may be moved into `catch_unwind`; see the note
// on `MutexGuard` (h43: `_marker`'s `&mut T` made it !UnwindSafe).
impl<T: ?Sized> std::panic::UnwindSafe for RwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the write lock is held.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write lock is held and &mut self is the only user.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.write_unlock();
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + core::fmt::Display> core::fmt::Display for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}
