//! P: a processor, the right to run goroutines. Go's `p` (runtime2.go).

use crate::atomic::{RelaxedPtr, RelaxedU32};
use crate::g::G;
use crate::m::M;
use crate::runq::Local;
use crate::timer::Timers;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

/// P statuses (Go's _Pidle etc.).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PStatus {
    /// In sched's idle list, no M; its run queue is empty.
    Idle = 0,
    /// Owned by an M running user code or the scheduler.
    Running = 1,
    /// Its M is in a system call; sysmon may retake it (CAS to Idle).
    Syscall = 2,
    /// Stopped for stop-the-world; owned by the STW initiator.
    Stopped = 3,
    /// Beyond GOMAXPROCS; kept for reuse when it grows.
    Dead = 4,
}

/// Max Gs on a P's free list before half spill to the global list.
pub(crate) const GFREE_MAX: i32 = 64;
/// Gs moved between the P and global free lists at a time.
pub(crate) const GFREE_BATCH: i32 = 32;
/// Goroutine ids are handed to Ps in batches (Go's _GoidCacheBatch).
pub(crate) const GOID_BATCH: u64 = 16;

/// A processor. Allocated once (allp never shrinks its storage), fields
/// owned by the P's current M unless they say otherwise.
pub(crate) struct P {
    /// Index in allp.
    pub(crate) id: usize,
    /// [`PStatus`]; CAS by sysmon (Syscall -> Idle) and STW, else owner.
    pub(crate) status: AtomicU32,
    /// Idle list link (under sched.lock).
    pub(crate) link: Cell<*mut P>,
    /// Incremented on every schedule call that does not inherit time.
    /// Owner-written; read racily by sysmon (a stale value only delays a
    /// preemption by a tick).
    pub(crate) schedtick: RelaxedU32,
    /// Incremented on every syscall (read by sysmon).
    pub(crate) syscalltick: AtomicU32,
    /// The M this P is attached to, or null. Written by the owning M;
    /// read racily by sysmon and stop-the-world (Ms are never freed, so a
    /// stale M only misdirects one preemption request).
    pub(crate) m: RelaxedPtr<M>,
    /// Local run queue + runnext (lock-free; see runq.rs).
    pub(crate) runq: Local<G>,
    /// Free dead Gs (with their stacks) and their count.
    pub(crate) gfree: Cell<*mut G>,
    pub(crate) gfree_n: Cell<i32>,
    /// Goroutine id cache [goidcache, goidcacheend).
    pub(crate) goidcache: Cell<u64>,
    pub(crate) goidcacheend: Cell<u64>,
    /// This P's timers (own lock; any P may run them).
    pub(crate) timers: Timers,
}

// SAFETY: Ps move between Ms only through acquirep/releasep under
// sched.lock or status CASes, which order the previous owner's writes.
unsafe impl Sync for P {}
// SAFETY: as above.
unsafe impl Send for P {}

impl P {
    pub(crate) fn new(id: usize) -> *mut P {
        Box::into_raw(Box::new(P {
            id,
            status: AtomicU32::new(PStatus::Dead as u32),
            link: Cell::new(ptr::null_mut()),
            schedtick: RelaxedU32::new(0),
            syscalltick: AtomicU32::new(0),
            m: RelaxedPtr::new(ptr::null_mut()),
            runq: Local::new(),
            gfree: Cell::new(ptr::null_mut()),
            gfree_n: Cell::new(0),
            goidcache: Cell::new(0),
            goidcacheend: Cell::new(0),
            timers: Timers::new(),
        }))
    }

    /// Acquire: pairs with the Release of whoever set the status, so a P
    /// taken over sees its previous owner's writes.
    #[inline]
    pub(crate) fn status(&self) -> PStatus {
        match self.status.load(Ordering::Acquire) {
            0 => PStatus::Idle,
            1 => PStatus::Running,
            2 => PStatus::Syscall,
            3 => PStatus::Stopped,
            _ => PStatus::Dead,
        }
    }

    /// Sets the status (owner only). Release: see `status`.
    #[inline]
    pub(crate) fn set_status(&self, s: PStatus) {
        self.status.store(s as u32, Ordering::Release);
    }

    /// CAS the status (sysmon retake, STW). AcqRel: see `status`.
    #[inline]
    pub(crate) fn cas_status(&self, from: PStatus, to: PStatus) -> bool {
        self.status
            .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}
