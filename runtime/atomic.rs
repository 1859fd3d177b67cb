//! Relaxed atomic cells: fields owned (written) by one thread and read
//! racily by others — sysmon, a stop-the-world initiator, a signal handler
//! on the owner's own thread. A plain `Cell` read from another thread is a
//! data race (undefined behaviour) even when any value would do; these
//! cells make the read defined while costing what a `Cell` costs (a plain
//! `mov` on x86_64 and aarch64).
//!
//! Every access is `Relaxed`: each field using these says why a stale value
//! is harmless to its racy readers. Ordering that matters (publishing a G's
//! context, handing over a P) comes from the status CASes and locks around
//! them, never from these cells.

use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// A pointer owned by one thread and read racily by others.
#[derive(Debug)]
pub(crate) struct RelaxedPtr<T>(AtomicPtr<T>);

impl<T> RelaxedPtr<T> {
    pub(crate) const fn new(p: *mut T) -> Self {
        RelaxedPtr(AtomicPtr::new(p))
    }
    #[inline]
    pub(crate) fn get(&self) -> *mut T {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub(crate) fn set(&self, p: *mut T) {
        self.0.store(p, Ordering::Relaxed)
    }
    /// Owner only: not an atomic swap (a load then a store), which is all
    /// a single writer needs and avoids a locked instruction.
    #[inline]
    pub(crate) fn replace(&self, p: *mut T) -> *mut T {
        let old = self.get();
        self.set(p);
        old
    }
    /// Owner only: stores `p` with Release, for a pointer whose target
    /// another thread may touch after reading it with [`Self::get_acquire`]
    /// (the one exception to "every access is Relaxed" above): the
    /// target's initialisation, which the owner saw, happens before the
    /// reader's accesses to it.
    #[inline]
    pub(crate) fn publish(&self, p: *mut T) {
        self.0.store(p, Ordering::Release)
    }
    /// Racy reader that dereferences what it reads: Acquire, pairs with
    /// [`Self::publish`].
    #[inline]
    pub(crate) fn get_acquire(&self) -> *mut T {
        self.0.load(Ordering::Acquire)
    }
}

/// A `u64` owned by one thread and read racily by others.
#[derive(Debug)]
pub(crate) struct RelaxedU64(AtomicU64);

impl RelaxedU64 {
    pub(crate) const fn new(v: u64) -> Self {
        RelaxedU64(AtomicU64::new(v))
    }
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// A `u32` owned by one thread and read racily by others.
#[derive(Debug)]
pub(crate) struct RelaxedU32(AtomicU32);

impl RelaxedU32 {
    pub(crate) const fn new(v: u32) -> Self {
        RelaxedU32(AtomicU32::new(v))
    }
    #[inline]
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub(crate) fn set(&self, v: u32) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// An `i32` owned by one thread and read racily by others (and by a
/// signal handler on the owner's thread).
#[derive(Debug)]
pub(crate) struct RelaxedI32(AtomicI32);

impl RelaxedI32 {
    pub(crate) const fn new(v: i32) -> Self {
        RelaxedI32(AtomicI32::new(v))
    }
    #[inline]
    pub(crate) fn get(&self) -> i32 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub(crate) fn set(&self, v: i32) {
        self.0.store(v, Ordering::Relaxed)
    }
}
