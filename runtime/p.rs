//! P: a processor, the right to run goroutines. Go's `p` (runtime2.go).

use crate::atomic::{RelaxedPtr, RelaxedU32};
use crate::g::G;
use crate::m::M;
use crate::proc::PacketCache;
use crate::runq::Local;
use crate::stack;
use crate::timer::Timers;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};

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

/// Max Gs on a P's free list of the default stack class before half spill
/// to the global list (Go's gfput: 64, then down to 32).
pub(crate) const GFREE_MAX: i32 = 64;
/// Bytes of reservation a P's free list of one power-of-two stack class
/// may hold (the default class always holds up to GFREE_MAX Gs, 16 MiB at
/// 256 KiB): larger classes keep fewer Gs per P, at least
/// CLASS_GFREE_MIN, so that a P does not sit on gigabytes of touched
/// stacks that sysmon's scavenger, which sees only the global lists,
/// cannot return.
const CLASS_GFREE_BYTES: usize = 16 << 20;

/// Fewest Gs a P's free list of one stack class holds before spilling.
const CLASS_GFREE_MIN: i32 = 4;

/// Most Gs `P::gfree[c]` holds before half of them spill to the global
/// list: GFREE_MAX for the default class 0, fewer for large classes.
#[inline]
pub(crate) fn gfree_max(c: usize) -> i32 {
    if c == 0 {
        return GFREE_MAX;
    }
    ((CLASS_GFREE_BYTES / stack::class_size(c)) as i32).clamp(CLASS_GFREE_MIN, GFREE_MAX)
}

/// Gs moved between `P::gfree[c]` and the global list of class `c` at a
/// time (32 for the default class).
#[inline]
pub(crate) fn gfree_batch(c: usize) -> i32 {
    gfree_max(c) / 2
}

/// A P's free list of dead Gs whose stacks share one size class (owner P
/// only).
pub(crate) struct GfreeList {
    /// First G, linked through `g.schedlink`; null when empty.
    pub(crate) head: Cell<*mut G>,
    /// Gs on the list.
    pub(crate) n: Cell<i32>,
}

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
    /// While the P waits for the template thread to create an M for it
    /// (sched.rs, `newm`): the next P in that list (under NEWM_HANDOFF's
    /// lock) and whether the new M is to start spinning. The P belongs to
    /// the pending request meanwhile; nothing else touches it.
    pub(crate) newm_link: Cell<*mut P>,
    pub(crate) newm_spinning: Cell<bool>,
    /// Incremented on every schedule call that does not inherit time.
    /// Owner-written; read racily by sysmon (a stale value only delays a
    /// preemption by a tick).
    pub(crate) schedtick: RelaxedU32,
    /// Incremented on every syscall (read by sysmon). Relaxed: a progress
    /// counter (Go's is a plain uint32); the P changes hands by its status
    /// CAS, never through this.
    pub(crate) syscalltick: AtomicU32,
    /// Incremented each time an M acquires this P (acquirep): with
    /// schedtick and syscalltick, sysmon's evidence that something ran
    /// (a G readied into runnext inherits its time slice and leaves
    /// schedtick alone). Written by the acquiring M, which owns the P from
    /// then on; read racily by sysmon (a stale value delays its all-idle
    /// wait by a tick).
    pub(crate) acquiretick: RelaxedU32,
    /// The M this P is attached to, or null. Written by the owning M;
    /// read racily by sysmon and stop-the-world (Ms are never freed, so a
    /// stale M only misdirects one preemption request).
    pub(crate) m: RelaxedPtr<M>,
    /// Local run queue + runnext (lock-free; see runq.rs).
    pub(crate) runq: Local<G>,
    /// Free dead Gs (with their stacks), one list per stack size class
    /// (`stack::size_class`; index 0: the default size).
    pub(crate) gfree: [GfreeList; stack::NCLASS],
    /// Goroutine id cache [goidcache, goidcacheend).
    pub(crate) goidcache: Cell<u64>,
    pub(crate) goidcacheend: Cell<u64>,
    /// Goroutines created minus goroutines exited on this P (either may
    /// be negative: a goroutine often exits on another P than its
    /// spawner's). `num_goroutine` sums these over every P ever created
    /// and the global count of P-less spawns (Go computes gcount from
    /// allglen and the free lists; a per-P count likewise keeps spawn and
    /// exit off a cache line shared by all Ps). Written only by the
    /// owning M, read racily by anyone: statistics only.
    pub(crate) ngoroutines: AtomicI64,
    /// Free JoinHandle packet blocks (Go's p.sudogcache; see proc.rs,
    /// "Join packet caches"). Kept by a P that procresize destroys (at
    /// most 2 × 64 blocks of 64 bytes).
    pub(crate) packetcache: PacketCache,
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
            newm_link: Cell::new(ptr::null_mut()),
            newm_spinning: Cell::new(false),
            schedtick: RelaxedU32::new(0),
            acquiretick: RelaxedU32::new(0),
            syscalltick: AtomicU32::new(0),
            m: RelaxedPtr::new(ptr::null_mut()),
            runq: Local::new(),
            gfree: core::array::from_fn(|_| GfreeList {
                head: Cell::new(ptr::null_mut()),
                n: Cell::new(0),
            }),
            goidcache: Cell::new(0),
            goidcacheend: Cell::new(0),
            ngoroutines: AtomicI64::new(0),
            packetcache: PacketCache::new(),
            timers: Timers::new(),
        }))
    }

    /// Adds `d` to this P's goroutine count. Owner M only, so a plain load
    /// and store suffice (no RMW, no shared line); Relaxed because readers
    /// only sum a statistic.
    #[inline]
    pub(crate) fn ngoroutines_add(&self, d: i64) {
        let n = self.ngoroutines.load(Ordering::Relaxed);
        self.ngoroutines.store(n + d, Ordering::Relaxed);
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
