//! G: a goroutine. Go's `g` (runtime2.go) and its status machine.

use crate::arch::Gobuf;
use crate::atomic::RelaxedU64;
use crate::m::M;
use crate::stack::Stack;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// Go's G statuses (runtime2.go, same numbers). Each says who owns the G's
/// stack and whether the G is on a queue.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GStatus {
    /// Just allocated, not yet initialised. Owned by the allocating thread.
    Idle = 0,
    /// On a run queue (local ring, runnext or global); not executing. The
    /// stack is owned by whoever dequeues it. `sched.sp` is valid.
    Runnable = 1,
    /// Executing user code on an M with a P. The stack is owned by the G.
    Running = 2,
    /// In a blocking system call (enter_syscall), on an M, P maybe handed off.
    Syscall = 3,
    /// Parked (gopark): on some wait queue (channel, timer, sema), not on a
    /// run queue. `sched.sp` is valid; whoever readies it owns it.
    Waiting = 4,
    /// Exited or on a free list; stack owned by the free list.
    Dead = 6,
    /// Stopped by preemption; owned by the preempting M until readied.
    Preempted = 9,
}

/// Go's `_Gscan` bit, or'ed into a status: `Waiting | SCAN` means the G is
/// parked and the stack shrinker (shrink.rs, which has the protocol) owns
/// its stack for a moment. Only the shrinker sets it, only on `Waiting`,
/// and only it clears it; [`G::cas_status`] from `Waiting` waits while it
/// is set, and [`G::status`] reads `Waiting | SCAN` as `Waiting`.
pub(crate) const SCAN: u32 = 0x1000;

impl GStatus {
    fn from_u32(v: u32) -> GStatus {
        match v {
            0 => GStatus::Idle,
            1 => GStatus::Runnable,
            2 => GStatus::Running,
            3 => GStatus::Syscall,
            4 => GStatus::Waiting,
            6 => GStatus::Dead,
            9 => GStatus::Preempted,
            _ => crate::throw::throw("bad g status"),
        }
    }
}

/// Orders the writes of a G's `name` (newproc sets it, goexit0 takes it)
/// with `dump`'s reads of other Gs' names, which race their exits: a dump
/// formatting the name of a goroutine exiting on another M read the freed
/// string (h27: SIGSEGV once the name was large enough to be munmapped).
/// Held only to move or clone the `Box`, never to format or drop it; taken
/// on g0 (goexit0) and in runtime critical sections, with no other lock
/// taken inside. Unnamed goroutines never take it. Go's goroutines have
/// no names (its tracebacks read only immutable G fields).
pub(crate) static NAMES: crate::lock_futex::RtMutex<()> = crate::lock_futex::RtMutex::new(());

/// Every G ever allocated (Go's allgs), for GODEBUG=scheddetail.
pub(crate) static ALLGS: crate::lock_futex::RtMutex<Vec<usize>> =
    crate::lock_futex::RtMutex::new(Vec::new());

/// Why the runtime tied a G to its M (`G::pinned`, preempt.rs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pin {
    /// Not pinned (lock_os_thread may still have locked it).
    No,
    /// Preempted asynchronously in pinned mode: the handler reserved one of
    /// `Config::preempt_pinned_max` sleeping Ms (preempt::PINNED), released
    /// when the G runs again.
    Preempted,
    /// Parked while unwinding a panic, or detached and waiting for a P
    /// after computing without one: the G cannot go on anywhere else, so
    /// the pin is not optional and not counted against the limit.
    Required,
}

/// A goroutine. Allocated once, never freed (as in Go): dead Gs are reused
/// through the free lists, so raw `*mut G` handles stay valid forever.
///
/// Fields are plain `Cell`s owned by whoever owns the G per its status
/// (see [`GStatus`]); the status itself is the only field read by others.
#[repr(C, align(64))]
pub(crate) struct G {
    // First cache line: what a park and a wake-up touch (gopark,
    // netpoll's ready, schedule's lockedm check, execute, gogo).
    /// Saved context while not running. Written by mcall on the G's own M,
    /// read by the M that resumes it after dequeuing it.
    pub(crate) sched: core::cell::UnsafeCell<Gobuf>,
    /// [`GStatus`] as u32, possibly with [`SCAN`] set on `Waiting`.
    /// Transitions only through [`G::cas_status`] (and the shrinker's
    /// [`G::try_scan`]/[`G::end_scan`], shrink.rs). The hand-over of a G
    /// is a Release transition paired with the next owner's Acquire one
    /// (each access says which).
    status: AtomicU32,
    /// Cooperative preemption request (Go's gp.preempt, a plain bool
    /// there), set by sysmon/STW, cleared by the G's M. Relaxed: a request
    /// with no data behind it; a stale false delays the yield to the next
    /// check or to the signal that follows, a stale true costs one yield.
    pub(crate) preempt: AtomicBool,
    /// Whether `lockedm` was set by the runtime, not by lock_os_thread, and
    /// why ([`Pin`]): the G must resume on the same M. Cleared by `execute`
    /// when it runs again. Owned by whoever owns the G.
    pub(crate) pinned: Cell<Pin>,
    /// Readied by netpoll: while it waited on a socket its stack has most
    /// likely left the caches, so `execute` prefetches the frames it will
    /// return through (sched.rs, `prefetch_frames`). Set by netpoll, which
    /// owns the G between taking it from the poll descriptor and queueing
    /// it; cleared by `execute`.
    pub(crate) cold: Cell<bool>,
    /// Why the G is parked ([`crate::waitreason::WaitReason`] as u8), set
    /// by gopark before the G is published as Waiting. Atomic (Relaxed)
    /// only so the dump and the deadlock check may read it racily from
    /// another thread: it is diagnostics, ordered by nothing.
    pub(crate) waitreason: AtomicU8,
    /// The M running this G (Running/Syscall), else null.
    pub(crate) m: Cell<*mut M>,
    /// The M this G is locked to by lock_os_thread (Go's g.lockedm), and
    /// the nesting count. Written only by the G itself.
    pub(crate) lockedm: Cell<*mut M>,
    /// When the G last parked (Go's g.waitsince), in `nanotime` ns, read
    /// from sysmon's clock (`waitreason::park_clock`, at most ~10 ms old,
    /// always even), for the dump's "N minutes" and the stack shrinker's
    /// park age. Bit 0 ([`crate::shrink::HANDLED`]) is set by the shrinker,
    /// under the scan bit, once it has dealt with this park; gopark's next
    /// stamp clears it for free. Relaxed, as waitreason.
    pub(crate) waitsince: AtomicI64,
    /// The stack; None for a dead G whose stack (of an unpooled size,
    /// see `stack::size_class`) was freed.
    pub(crate) stack: Cell<Option<Stack>>,
    // Second cache line: channels and select, identity, the rest.
    /// Wake-up parameter (Go's gp.param): set by the waker before goready,
    /// read by the G after it resumes (goready's queue handoff orders them).
    /// Relaxed everywhere, for that reason.
    pub(crate) param: AtomicUsize,
    /// Go's gp.selectDone, with a generation: `2*seq + done`. A select (or
    /// timed wait) bumps seq before queueing; the first waker to CAS
    /// `2*seq -> 2*seq+1` wins; stale timers and sudogs of an older wait
    /// fail their CAS. The wakers' CASes are AcqRel; the G's own stores
    /// are Relaxed (published by the channel locks or the timer lock the
    /// waker takes); racy loads only pre-judge a CAS.
    pub(crate) selgen: AtomicU64,
    /// Link for the global run queue and the free lists (owner of the list).
    pub(crate) schedlink: Cell<*mut G>,
    /// Goroutine id, unique per process; 0 while dead. Written by the G's
    /// owner (newproc, goexit0); read racily by the dump, scheddetail and
    /// the test hook `goroutine_parked`, hence a Relaxed atomic: a stale
    /// id is harmless to them (ThreadSanitizer found the plain `Cell`
    /// read racing goexit0's write; docs/TESTING.md).
    pub(crate) goid: RelaxedU64,
    /// Name from Builder::name, for diagnostics.
    pub(crate) name: core::cell::UnsafeCell<Option<Box<str>>>,
    /// Goroutine-local storage (local.rs owns the representation); null
    /// when the G has none. Touched only by the G itself.
    pub(crate) locals: Cell<*mut u8>,
    pub(crate) locked_count: Cell<u32>,
    /// ThreadSanitizer's fiber for this goroutine (arch::Fiber; zero-sized
    /// without `cfg(goro_tsan)`): created by newproc, destroyed by goexit0,
    /// so one per goroutine, not per G struct. Owned by whoever owns the G.
    pub(crate) fiber: Cell<crate::arch::Fiber>,
}

// SAFETY: Gs are handed between threads only through the run queues, wait
// queues and status CASes, each of which orders the owner's writes before the
// next owner's reads; non-atomic fields are touched only by the current owner.
unsafe impl Sync for G {}
// SAFETY: as above.
unsafe impl Send for G {}

impl G {
    /// Go's malg: allocates a new G (status Idle) with the given stack.
    pub(crate) fn alloc(stack: Option<Stack>) -> *mut G {
        let gp = Box::into_raw(Box::new(G::new(stack)));
        ALLGS.lock().push(gp as usize);
        gp
    }

    /// A G in status Idle, not yet known to the runtime.
    fn new(stack: Option<Stack>) -> G {
        G {
            sched: core::cell::UnsafeCell::new(Gobuf::default()),
            status: AtomicU32::new(GStatus::Idle as u32),
            goid: RelaxedU64::new(0),
            stack: Cell::new(stack),
            m: Cell::new(ptr::null_mut()),
            schedlink: Cell::new(ptr::null_mut()),
            param: AtomicUsize::new(0),
            selgen: AtomicU64::new(0),
            preempt: AtomicBool::new(false),
            name: core::cell::UnsafeCell::new(None),
            lockedm: Cell::new(ptr::null_mut()),
            locked_count: Cell::new(0),
            pinned: Cell::new(Pin::No),
            cold: Cell::new(false),
            locals: Cell::new(ptr::null_mut()),
            waitreason: AtomicU8::new(0),
            waitsince: AtomicI64::new(0),
            fiber: Cell::new(crate::arch::Fiber::NONE),
        }
    }

    /// Current status, the scan bit masked off (a G being shrunk is
    /// Waiting to every reader: dump, deadlock check, stats). Acquire:
    /// pairs with the Release of the transition that handed the G over, so
    /// its saved context is visible.
    #[inline]
    pub(crate) fn status(&self) -> GStatus {
        GStatus::from_u32(self.status.load(Ordering::Acquire) & !SCAN)
    }

    /// Why the G last parked (`waitreason`), a racy diagnostic read for the
    /// dump, the deadlock check and scheddetail: meaningful while the G is
    /// Waiting.
    pub(crate) fn wait_reason(&self) -> crate::waitreason::WaitReason {
        crate::waitreason::WaitReason::from_u8(self.waitreason.load(Ordering::Relaxed))
    }

    /// Go's casgstatus: the only way statuses change. Throws on a lost
    /// transition (the status was not `from`: a runtime bug); debug builds
    /// also assert that the transition is a legal one. A transition out of `Waiting`
    /// that finds the shrinker's scan bit set waits for it to clear (the
    /// protocol is in shrink.rs); the wait is on the CAS-failure path only,
    /// so the successful CAS costs what it did before.
    #[inline]
    pub(crate) fn cas_status(&self, from: GStatus, to: GStatus) {
        debug_assert!(legal(from, to), "illegal G transition {from:?} -> {to:?}");
        // AcqRel: Release publishes the G's saved context and fields to the
        // next owner; Acquire takes those of the previous one.
        if self
            .status
            .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.cas_status_slow(from, to);
        }
    }

    /// The CAS of [`G::cas_status`] failed: wait out the shrinker's scan
    /// bit (Go's casgstatus loop: spin with a pause, then yield the CPU,
    /// since the shrinker may be descheduled inside its `madvise`), or
    /// throw if the status is anything else.
    #[cold]
    #[inline(never)]
    fn cas_status_slow(&self, from: GStatus, to: GStatus) {
        let mut spins = 0u32;
        loop {
            // Relaxed: only decides whether to retry; the CAS below has
            // the orderings (its Acquire pairs with `end_scan`'s Release,
            // so the shrinker's madvise is done before we own the G).
            let cur = self.status.load(Ordering::Relaxed);
            if cur == from as u32 | SCAN {
                if spins == 0 {
                    crate::shrink::SCAN_WAITS.fetch_add(1, Ordering::Relaxed); // statistics only
                }
                spins += 1;
                if spins < 100 {
                    core::hint::spin_loop();
                } else {
                    crate::os::osyield();
                }
                continue;
            }
            if cur != from as u32 {
                crate::throw::throwf(format_args!(
                    "casgstatus: bad transition {:?} -> {:?} (status is {:#x})",
                    from, to, cur
                ));
            }
            // Failure: the shrinker set the bit again in between; the
            // next round waits or throws. Orderings: as in cas_status.
            if self
                .status
                .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Shrinker side (shrink.rs): `Waiting -> Waiting | SCAN`, Go's
    /// castogscanstatus. True if the G was Waiting and is now held: no
    /// transition out of Waiting can complete until [`G::end_scan`], so its
    /// saved context and stack stay as they are. sysmon only.
    #[inline]
    pub(crate) fn try_scan(&self) -> bool {
        let w = GStatus::Waiting as u32;
        // Acquire: pairs with park_m's Release (Running -> Waiting), so the
        // saved sp, the stack and waitsince of this very park are visible.
        // Nothing of ours needs publishing yet (no Release). Relaxed on
        // failure: we then touch nothing.
        self.status
            .compare_exchange(w, w | SCAN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Shrinker side: `Waiting | SCAN -> Waiting`, Go's
    /// casfrom_Gscanstatus. Throws if the G was not held (nobody else may
    /// change a status with the bit set). sysmon only.
    #[inline]
    pub(crate) fn end_scan(&self) {
        let w = GStatus::Waiting as u32;
        // Release: pairs with the Acquire of the waker's CAS out of Waiting
        // (cas_status), so our madvise and the HANDLED mark are complete
        // before anyone owns the G and runs it on this stack.
        if self
            .status
            .compare_exchange(w | SCAN, w, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            crate::throw::throw("end_scan: G status changed under the scan bit");
        }
    }

    /// Pointer to the saved context.
    #[inline]
    pub(crate) fn gobuf(&self) -> *mut Gobuf {
        self.sched.get()
    }
}

fn legal(from: GStatus, to: GStatus) -> bool {
    use GStatus::*;
    matches!(
        (from, to),
        (Idle, Dead)
            | (Dead, Runnable)
            | (Runnable, Running)
            | (Running, Runnable)
            | (Running, Waiting)
            | (Running, Syscall)
            | (Running, Dead)
            | (Running, Preempted)
            | (Syscall, Running)
            | (Syscall, Runnable)
            | (Waiting, Runnable)
            | (Preempted, Runnable)
            | (Preempted, Waiting)
    )
}

#[cfg(test)]
mod tests {
    use super::G;
    use core::mem::{offset_of, size_of, size_of_val};

    /// The fields a park and a netpoll wake-up touch share the G's first
    /// cache line (the struct's comment): a G readied after its socket sat
    /// idle costs one miss there, not two or three (docs/BENCHMARKS.md,
    /// session 27).
    #[test]
    fn park_and_wake_fields_share_the_first_cache_line() {
        assert_eq!(core::mem::align_of::<G>(), 64);
        let g = G::new(None);
        let ends = [
            offset_of!(G, sched) + size_of_val(&g.sched),
            offset_of!(G, status) + size_of_val(&g.status),
            offset_of!(G, preempt) + 1,
            offset_of!(G, pinned) + 1,
            offset_of!(G, cold) + 1,
            offset_of!(G, waitreason) + 1,
            offset_of!(G, m) + size_of_val(&g.m),
            offset_of!(G, lockedm) + size_of_val(&g.lockedm),
            offset_of!(G, waitsince) + size_of_val(&g.waitsince),
            offset_of!(G, stack) + size_of_val(&g.stack),
        ];
        for (i, end) in ends.into_iter().enumerate() {
            assert!(end <= 64, "hot field {i} ends at byte {end}");
        }
        #[cfg(not(goro_tsan))]
        assert_eq!(size_of::<G>(), 128, "two cache lines");
        let _ = size_of::<G>();
    }
}
