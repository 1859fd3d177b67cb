//! The scheduler: schedule, findRunnable, work stealing, and the M/P
//! hand-offs (wakep, startm, stopm, handoffp). Go's proc.go.
//!
//! # Worker thread parking/unparking
//!
//! (After Go's essay of the same name in proc.go.) We must keep enough Ms
//! running to use the available Ps, and park the rest to save CPU. The
//! difficulty is that work is submitted from many places at once (newproc,
//! goready, timers, netpoll) and the decision to park races with it.
//!
//! Rejected designs: (1) centralising all scheduler state behind one lock
//! (does not scale); (2) direct handoff of the goroutine to a woken M (costs
//! a wake-up and thread migration per readied G: the readying M will often be
//! free to run it itself a moment later); (3) waking an M whenever a G is
//! readied and there is an idle P (excessive wake-ups; Ms find nothing and
//! park again).
//!
//! Chosen design: an M is *spinning* when it has a P, found no work in its
//! local queue, global queue and netpoll, and is looking for work to steal.
//! Spinning Ms are counted in `sched.nmspinning`. When work is submitted and
//! there is an idle P and no spinning M, one M is woken (wakep) to spin.
//! A spinning M that finds work stops spinning and, if it was the last
//! spinner, wakes another one (resetspinning): this limits wake-ups to bursts
//! while ensuring a new batch of work never waits for a running G to yield.
//!
//! The lost wake-up race, and the protocol that closes it. Submitter:
//! (a) publish the G (run queue store), (b) StoreLoad fence, (c) read
//! nmspinning/npidle in wakep. Spinning M about to park: (1) put its P on the
//! idle list (npidle++), (2) nmspinning-- , (3) StoreLoad fence, (4) re-check
//! every P's run queue (and the global queue) and, if it finds work, take a P
//! back and spin again. Either the submitter sees the spinner (and relies on
//! it) or the spinner's re-check sees the G: both fences are `fence(SeqCst)`
//! below, marked "StoreLoad (parking essay)". Unlike Go, an M that was not
//! spinning re-checks too when nmspinning reads 0 after its fence: it may
//! have skipped stealing because of wakep's transient increment (nmspinning
//! raised before startm looks for an idle P, undone there if none), and then
//! nobody would find a G readied while its P still looked busy.
//!
//! runtime/spinning_model.rs is a loom model of this protocol (a miniature
//! of wakep, startm, find_runnable's give-up path and stopm, step by step):
//! a change to the order or orderings here must be made there too, and
//! `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib spinning_model`
//! run (docs/TESTING.md).
//!
//! # Where code runs
//! - `schedule`, `find_runnable`, `execute`, `stopm`: g0 only.
//! - `wakep`, `startm`, `goready` (park.rs): any M, with or without a P.
//! - run-queue puts: owner P only. Steals: any M holding a P.

use crate::g::{GStatus, G};
use crate::lock_futex::{RtMutex as Mutex, RtMutexGuard as MutexGuard};
use crate::m::{getm, setm, Note, M, MAX_M};
use crate::p::{self, PStatus, GOID_BATCH, P};
use crate::runq::LOCAL_CAP;
use crate::stack;
use crate::{arch, netpoll, os};
use core::ptr;
use core::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};

/// Largest GOMAXPROCS accepted (Ps are preallocated slots in `ALLP`).
pub const MAX_PROCS: usize = 1024;

/// Go's schedule fairness: every 61st schedtick takes from the global queue.
const GLOBAL_FAIRNESS_TICK: u32 = 61;

/// Steal rounds over all Ps (Go's stealTries).
const STEAL_TRIES: usize = 4;

/// Everything guarded by sched.lock (Go's schedt fields under lock).
pub(crate) struct Synced {
    /// Global run queue (intrusive through g.schedlink).
    runq_head: *mut G,
    runq_tail: *mut G,
    runqsize: i32,
    /// Idle Ps.
    pidle: *mut P,
    /// Idle Ms.
    midle: *mut M,
    pub(crate) nmidle: i32,
    /// M structs allocated so far (next M id; exited Ms' structs and ids
    /// are reused, see allocm).
    pub(crate) mnext: i64,
    /// STW: Ps still to stop.
    stopwait: i32,
}

// SAFETY: only reachable through the lock.
unsafe impl Send for Synced {}

/// The global free Gs of one stack size class (under [`GFREE`]):
/// recently freed ("hot", stack pages still resident) and scavenged
/// ("cold", pages returned to the OS); `n` counts both.
struct GfreeGlobal {
    hot: *mut G,
    cold: *mut G,
    n: i32,
    /// Gs taken from these lists (only grows). The scavenger leaves the
    /// class alone while this moves: a pool in use is kept hot.
    pops: u64,
    /// `pops` when the scavenger last looked.
    pops_seen: u64,
}

impl GfreeGlobal {
    const EMPTY: GfreeGlobal = GfreeGlobal {
        hot: ptr::null_mut(),
        cold: ptr::null_mut(),
        n: 0,
        pops: 0,
        pops_seen: 0,
    };
}

/// Go's sched.gFree: the global free Gs (with stacks), one pair of lists
/// per stack size class (`stack::size_class`; 0: the default size), under
/// their own lock as in Go, so spawns refilling their P's list and exits
/// spilling to it do not wait behind the run queue's users of
/// sched.lock. A leaf lock: taken with sched.lock held (procresize),
/// never the other way round, and nothing is locked while it is held.
pub(crate) struct GfreeLists {
    l: [GfreeGlobal; stack::NCLASS],
}

// SAFETY: the lists are reachable only through GFREE's lock.
unsafe impl Send for GfreeLists {}

impl GfreeLists {
    /// Pushes a dead G on the global hot free list of stack class `c`.
    fn gfree_push(&mut self, c: usize, gp: *mut G) {
        let l = &mut self.l[c];
        // SAFETY: gp is dead and owned by the caller until listed.
        unsafe { (*gp).schedlink.set(l.hot) };
        l.hot = gp;
        l.n += 1;
        NGFREE[c].store(l.n, Ordering::Relaxed);
        GFREE_HOT.store(true, Ordering::Relaxed);
    }

    /// Pops a dead G from the global free lists of stack class `c`, hot
    /// stacks first; null if both are empty.
    fn gfree_pop(&mut self, c: usize) -> *mut G {
        let l = &mut self.l[c];
        let list = if l.hot.is_null() {
            &mut l.cold
        } else {
            &mut l.hot
        };
        let gp = *list;
        if !gp.is_null() {
            // SAFETY: gp is on a global free list, owned under GFREE.
            *list = unsafe { (*gp).schedlink.get() };
            l.n -= 1;
            l.pops += 1;
            NGFREE[c].store(l.n, Ordering::Relaxed);
        }
        gp
    }
}

/// The global G free lists (see [`GfreeLists`]).
static GFREE: Mutex<GfreeLists> = Mutex::new(GfreeLists {
    l: [const { GfreeGlobal::EMPTY }; stack::NCLASS],
});

/// Go's schedt.
pub(crate) struct Sched {
    pub(crate) lock: Mutex<Synced>,
    /// Spinning Ms. SeqCst everywhere, as Go's (the parking essay's
    /// StoreLoad pairs), but `stats()`'s Relaxed read (a statistic).
    pub(crate) nmspinning: AtomicI32,
    /// Idle Ps (mirror of the idle list length, written under lock).
    /// Written SeqCst (pidleput's increment is the parker's store in the
    /// parking essay); read SeqCst where a wake-up depends on it (wakep,
    /// handoffp, the spinner cap, inject_glist), Relaxed under the lock
    /// (exact) or as a statistic or sysmon hint.
    pub(crate) npidle: AtomicI32,
    /// Global run queue length (mirror, written under lock, read racily to
    /// skip taking the lock). Relaxed: the queue itself is read under the
    /// lock; a stale 0 is harmless because every global put is followed
    /// by a wakep, and an M idles its P only after checking
    /// `Synced::runqsize` under the lock.
    pub(crate) runqsize: AtomicI32,
    /// GOMAXPROCS. Stored (SeqCst) by procresize after it published the
    /// Ps in ALLP; loaded with Acquire by `gomaxprocs()`, which pairs.
    pub(crate) gomaxprocs: AtomicI32,
    /// Stop-the-world requested (Go's gcwaiting). Stored SeqCst under
    /// sched.lock; loads under the lock are exact, loads without it are
    /// hints (Relaxed or Acquire; no data is read through the flag): a
    /// stale false is caught under the lock (find_runnable's give-up, the
    /// Ps' own stop paths) or by stop_the_world's re-preempt loop, which
    /// keeps asking every 100 µs.
    pub(crate) gcwaiting: AtomicBool,
    /// STW initiator sleeps here until stopwait reaches 0.
    stopnote: Note,
    /// Last time netpoll was entered; 0 while an M is blocked in it (Go's
    /// lastpoll), and the deadline it is blocked until (Go's pollUntil).
    /// SeqCst, as Go's, where an M elects itself the poller (the swap to
    /// 0) and where a waker decides whether to break it
    /// (wake_netpoller); the Relaxed reads are hints (poll without
    /// blocking, keep an M for the network, sysmon's poll), a stale value
    /// costing one needless or one skipped poll or M start.
    pub(crate) lastpoll: AtomicI64,
    /// SeqCst everywhere, as Go's.
    pub(crate) poll_until: AtomicI64,
    /// Goroutine id generator (batches go to Ps). Relaxed: ids need only
    /// the RMW's uniqueness.
    goidgen: AtomicU64,
    /// Goroutines spawned from plain threads (no P); the rest are counted
    /// per P (`P::ngoroutines`, summed by `gcount`). Relaxed: a statistic.
    pub(crate) ngoroutines: AtomicI64,
    /// Live Ms (threads running or able to run goroutines): +1 in newm,
    /// -1 in mexit (Go's mcount()). Relaxed: the RMWs keep the count
    /// exact; no other memory is read through it.
    pub(crate) mcount: AtomicI32,
    /// Default stack size for new goroutines (bytes, page-rounded).
    /// Relaxed: stored in `start` before its Release of STARTED, which
    /// every spawn Acquires first.
    pub(crate) stack_size: AtomicUsize,
    /// STW serialisation (procresize callers).
    stw: Mutex<()>,
    /// sysmon sleeps on `sysmonnote` while every P is idle (Go's
    /// sysmonwait); set and cleared under sched.lock, read without it by
    /// acquirep (Relaxed: a stale false only delays sysmon to its timeout,
    /// a stale true costs one lock).
    pub(crate) sysmonwait: AtomicBool,
    pub(crate) sysmonnote: Note,
}

/// The scheduler singleton.
pub(crate) static SCHED: Sched = Sched {
    lock: Mutex::new(Synced::new()),
    nmspinning: AtomicI32::new(0),
    npidle: AtomicI32::new(0),
    runqsize: AtomicI32::new(0),
    gomaxprocs: AtomicI32::new(0),
    gcwaiting: AtomicBool::new(false),
    stopnote: Note::new(),
    lastpoll: AtomicI64::new(1),
    poll_until: AtomicI64::new(0),
    goidgen: AtomicU64::new(0),
    ngoroutines: AtomicI64::new(0),
    mcount: AtomicI32::new(0),
    stack_size: AtomicUsize::new(256 << 10),
    stw: Mutex::new(()),
    sysmonwait: AtomicBool::new(false),
    sysmonnote: Note::new(),
};

/// Every live M (Go's allm), for GODEBUG=scheddetail; mexit removes its M.
pub(crate) static ALLM: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// All Ps ever created, indexed by id; slots < gomaxprocs are live. Ps are
/// never freed, so any M may read any slot without a snapshot. Release in
/// procresize (publishes the initialised P) pairs with every Acquire load.
pub(crate) static ALLP: [AtomicPtr<P>; MAX_PROCS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_PROCS];

/// The P with index `i` (must exist).
#[inline]
pub(crate) fn allp(i: usize) -> &'static P {
    // Acquire pairs with the Release in procresize that published it.
    let pp = ALLP[i].load(Ordering::Acquire);
    // SAFETY: Ps are never freed; i < gomaxprocs was checked by callers.
    unsafe { &*pp }
}

#[inline]
pub(crate) fn gomaxprocs() -> usize {
    // Acquire pairs with procresize's SeqCst store: a reader that sees the
    // new count also sees the Ps it published in ALLP before it.
    SCHED.gomaxprocs.load(Ordering::Acquire) as usize
}

// ---------------------------------------------------------------------------
// Global run queue (under sched.lock).

impl Synced {
    /// Empty queues and lists.
    const fn new() -> Synced {
        Synced {
            runq_head: ptr::null_mut(),
            runq_tail: ptr::null_mut(),
            runqsize: 0,
            pidle: ptr::null_mut(),
            midle: ptr::null_mut(),
            nmidle: 0,
            mnext: 0,
            stopwait: 0,
        }
    }

    /// Go's globrunqput.
    pub(crate) fn globrunqput(&mut self, gp: *mut G) {
        // SAFETY: gp is a runnable G owned by the caller until queued.
        unsafe { (*gp).schedlink.set(ptr::null_mut()) };
        if self.runq_tail.is_null() {
            self.runq_head = gp;
        } else {
            // SAFETY: the tail is a queued G; the queue is ours under lock.
            unsafe { (*self.runq_tail).schedlink.set(gp) };
        }
        self.runq_tail = gp;
        self.runqsize += 1;
        SCHED.runqsize.store(self.runqsize, Ordering::Relaxed);
    }

    /// Go's globrunqputhead.
    fn globrunqputhead(&mut self, gp: *mut G) {
        // SAFETY: as in globrunqput.
        unsafe { (*gp).schedlink.set(self.runq_head) };
        self.runq_head = gp;
        if self.runq_tail.is_null() {
            self.runq_tail = gp;
        }
        self.runqsize += 1;
        SCHED.runqsize.store(self.runqsize, Ordering::Relaxed);
    }

    fn globrunqpop(&mut self) -> *mut G {
        let gp = self.runq_head;
        if gp.is_null() {
            return gp;
        }
        // SAFETY: gp is queued; the queue is ours under lock.
        self.runq_head = unsafe { (*gp).schedlink.get() };
        // Start fetching the frame gogo will pop: the G's line is in cache
        // now (just read), and a batch's frames then arrive in parallel
        // instead of one cache miss at a time in goro_restore, each G's
        // first touch of its stack (perf: 22% of spawn_wait's samples).
        // SAFETY: a queued G's context is saved and nothing resumes it
        // while we hold the queue; reading its sp races with nobody.
        crate::arch::prefetch_write(unsafe { (*(*gp).gobuf()).sp });
        if self.runq_head.is_null() {
            self.runq_tail = ptr::null_mut();
        }
        self.runqsize -= 1;
        SCHED.runqsize.store(self.runqsize, Ordering::Relaxed);
        gp
    }

    /// Go's globrunqget: take a batch of min(size/GOMAXPROCS + 1, max,
    /// 128) Gs, return one and put the rest on `pp`'s local queue.
    fn globrunqget(&mut self, pp: &P, max: i32) -> *mut G {
        if self.runqsize == 0 {
            return ptr::null_mut();
        }
        let mut n = self.runqsize / (gomaxprocs() as i32).max(1) + 1;
        n = n.min(self.runqsize);
        if max > 0 {
            n = n.min(max);
        }
        n = n.min(LOCAL_CAP as i32 / 2);
        let gp = self.globrunqpop();
        for _ in 1..n {
            let g1 = self.globrunqpop();
            pp.runq.put(g1, false, |_| {
                crate::throw::throw("globrunqget: local queue overflow")
            });
        }
        gp
    }

    /// Go's pidleput. The P must have an empty run queue.
    fn pidleput(&mut self, pp: &P) {
        pp.set_status(PStatus::Idle);
        pp.m.set(ptr::null_mut());
        pp.link.set(self.pidle);
        self.pidle = pp as *const P as *mut P;
        SCHED.npidle.fetch_add(1, Ordering::SeqCst); // SeqCst: StoreLoad (parking essay)
    }

    /// Go's pidleget.
    fn pidleget(&mut self) -> *mut P {
        let pp = self.pidle;
        if !pp.is_null() {
            // SAFETY: idle Ps are owned by the list under lock.
            self.pidle = unsafe { (*pp).link.get() };
            SCHED.npidle.fetch_sub(1, Ordering::SeqCst);
        }
        pp
    }

    /// Go's mput.
    fn mput(&mut self, mp: *mut M) {
        // SAFETY: mp is the calling M, alive forever.
        unsafe { (*mp).schedlink.set(self.midle) };
        self.midle = mp;
        self.nmidle += 1;
    }

    /// A P counted by the running stop-the-world has stopped: one fewer
    /// to wait for; the last one wakes the stopper. `who` names the caller
    /// in the throw for a P the stop-the-world did not count (better a
    /// message now than the next stop waiting for ever).
    fn stopped_one(&mut self, who: &str) {
        self.stopwait -= 1;
        if self.stopwait < 0 {
            crate::throw::throwf(format_args!("{who}: negative stopwait"));
        }
        if self.stopwait == 0 {
            SCHED.stopnote.wakeup();
        }
    }

    /// Go's mget, choosing among the first [`MGET_SCAN`] idle Ms one that
    /// went idle on a CPU other than `cpu` (the caller's), else the most
    /// recently idled M as Go does. Why: see "Which idle M" at [`startm`].
    fn mget_away_from(&mut self, cpu: i32) -> *mut M {
        let mut prev: *mut M = ptr::null_mut();
        let mut mp = self.midle;
        let mut n = 0;
        while !mp.is_null() && n < MGET_SCAN {
            // SAFETY: idle Ms are owned by the list under lock.
            let m = unsafe { &*mp };
            let next = m.schedlink.get();
            if cpu >= 0 && m.idle_cpu.get() != cpu {
                if prev.is_null() {
                    self.midle = next;
                } else {
                    // SAFETY: prev is an earlier entry of the same list.
                    unsafe { (*prev).schedlink.set(next) };
                }
                self.nmidle -= 1;
                return mp;
            }
            prev = mp;
            mp = next;
            n += 1;
        }
        self.mget()
    }

    /// Go's mget.
    fn mget(&mut self) -> *mut M {
        let mp = self.midle;
        if !mp.is_null() {
            // SAFETY: idle Ms are owned by the list under lock.
            self.midle = unsafe { (*mp).schedlink.get() };
            self.nmidle -= 1;
        }
        mp
    }
}

// ---------------------------------------------------------------------------
// Runtime start.

/// Release in `start` (after every initialisation) pairs with the
/// Acquire in `started()` and `start`.
static STARTED: AtomicBool = AtomicBool::new(false);
static START_LOCK: Mutex<()> = Mutex::new(());

/// sysmon's thread exists (it may precede a start that then failed).
/// Relaxed: read and written under START_LOCK only.
static SYSMON_STARTED: AtomicBool = AtomicBool::new(false);

/// Whether the runtime is running.
pub(crate) fn started() -> bool {
    // Acquire pairs with the Release in `start`.
    STARTED.load(Ordering::Acquire)
}

/// `e` with what failed in front (its kind kept, for callers that match
/// on it): "cannot create the sysmon thread: Resource temporarily
/// unavailable (os error 11)".
fn context(what: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Go's schedinit + main's first steps: allocate Ps, init netpoll, start
/// sysmon. Idempotent; returns false if it was already running. Errors say
/// which step failed, with the OS error's kind.
pub(crate) fn start(cfg: &crate::Config) -> std::io::Result<bool> {
    let _g = START_LOCK.lock();
    if STARTED.load(Ordering::Acquire) {
        return Ok(false);
    }
    SCHED
        .stack_size
        .store(stack::round_size(cfg.stack_size), Ordering::Relaxed);
    netpoll::init().map_err(|e| context("cannot set up the netpoller (epoll)", e))?;
    // The runtime's lock reads the CPU count on its first contention, and
    // std's query allocates (it reads cgroup files): computed here, not on
    // g0 of a thread whose goroutine was preempted inside the allocator
    // (docs/PREEMPTION.md).
    os::ncpu_cached();
    crate::preempt::init(cfg);
    crate::signal_unix::init(cfg.preempt || cfg.detect_blocking);
    crate::sysmon::configure(cfg);
    // Relaxed: see CRASH_ON_FATAL (no M or report thread exists yet).
    crate::throw::CRASH_ON_FATAL.store(cfg.crash_on_fatal, Ordering::Relaxed);
    // The steps that can fail (thread creation) come first, and every
    // step before them is idempotent: a start that failed (threads or fds
    // exhausted) can be retried.
    start_template_thread().map_err(|e| context("cannot create the template thread", e))?;
    if !SYSMON_STARTED.load(Ordering::Relaxed) {
        crate::sysmon::start().map_err(|e| context("cannot create the sysmon thread", e))?;
        SYSMON_STARTED.store(true, Ordering::Relaxed);
    }
    // The SIGQUIT dump's pipe and thread (if configured): the last step
    // that can fail; it leaves nothing behind when it does.
    crate::dump::init(cfg)?;
    // Relaxed: published by the Release of STARTED below.
    SCHED.lastpoll.store(os::nanotime(), Ordering::Relaxed);
    {
        let mut s = SCHED.lock.lock();
        procresize(&mut s, cfg.max_procs as i32, ptr::null_mut());
    }
    crate::deadlock::init(cfg);
    STARTED.store(true, Ordering::Release);
    crate::trace::init_from_env();
    Ok(true)
}

// ---------------------------------------------------------------------------
// Goroutine ids and free lists.

/// Next goroutine id from `pp`'s cache (Go's newproc1 goid batching).
pub(crate) fn next_goid(pp: Option<&P>) -> u64 {
    match pp {
        Some(pp) => {
            if pp.goidcache.get() == pp.goidcacheend.get() {
                // Relaxed: uniqueness comes from the RMW alone.
                let end = SCHED.goidgen.fetch_add(GOID_BATCH, Ordering::Relaxed) + GOID_BATCH;
                pp.goidcache.set(end - GOID_BATCH + 1);
                pp.goidcacheend.set(end + 1);
            }
            let id = pp.goidcache.get();
            pp.goidcache.set(id + 1);
            id
        }
        None => SCHED.goidgen.fetch_add(1, Ordering::Relaxed) + 1,
    }
}

/// Go's gcount: live goroutines, the P-less spawns' global count plus
/// every P's (`P::ngoroutines`; destroyed Ps keep theirs, Ps are never
/// freed). Racy, as Go's is: a goroutine spawned on one P and exited on
/// another may be counted by one side only while the other's write is
/// in flight; clamped at 0.
pub(crate) fn gcount() -> usize {
    // Relaxed throughout: a statistic, no other memory is read through it.
    let mut n = SCHED.ngoroutines.load(Ordering::Relaxed);
    for slot in ALLP.iter() {
        // Acquire: pairs with procresize's Release (SAFETY below).
        let pp = slot.load(Ordering::Acquire);
        if pp.is_null() {
            break;
        }
        // SAFETY: Ps are never freed; Acquire pairs with procresize's
        // Release that published this one.
        n += unsafe { &*pp }.ngoroutines.load(Ordering::Relaxed);
    }
    n.max(0) as usize
}

/// Go's gfput: put a dead G on `pp`'s free list of its stack's size class
/// (Go keys stacks by size in stackpool/stackLarge; goro keeps them with
/// their G); spill half to the global list of that class when the P holds
/// `p::gfree_max` (GFREE_MAX for the default class). A stack of an
/// unpooled size (above `stack::MAX_POOLED_STACK_SIZE`) goes back to the
/// stack cache (`stack::free`: one madvise, one lock) and its G joins the
/// default class stackless. (Cold pages of pooled stacks are returned to
/// the OS later, off the hot path, by `scavenge_gfree`, except a stack of
/// 1 MiB or more that its G used deeply: at once, `Stack::release_if_deep`.)
/// Owner P only.
pub(crate) fn gfput(pp: &P, gp: *mut G) {
    // SAFETY: gp is dead and owned by the caller.
    let g = unsafe { &*gp };
    if let Some(s) = g.stack.get() {
        // Relaxed: set once before the runtime starts (see `start`).
        let default = SCHED.stack_size.load(Ordering::Relaxed);
        if s.size() != default {
            return gfput_sized(pp, gp, s, default);
        }
        s.release_if_deep();
    }
    gfput_class(pp, gp, 0);
}

/// gfput of a G whose stack is not of the default size: to its class's
/// list, or stackless to the default class if the size is unpooled.
#[cold]
#[inline(never)]
fn gfput_sized(pp: &P, gp: *mut G, s: stack::Stack, default: usize) {
    match stack::class_of(s.size(), default) {
        Some(c) => {
            s.release_if_deep();
            gfput_class(pp, gp, c)
        }
        None => {
            // SAFETY: gp is dead and owned by the caller.
            let g = unsafe { &*gp };
            if let Some(s) = g.stack.take() {
                stack::free(s);
            }
            gfput_class(pp, gp, 0);
        }
    }
}

/// Pushes dead `gp` on `pp`'s free list of class `c`, spilling half of it
/// to the global list at `p::gfree_max(c)`. Inlined so that the default
/// class (constant 0) costs what a single list did.
#[inline(always)]
fn gfput_class(pp: &P, gp: *mut G, c: usize) {
    // SAFETY: gp is dead and owned by the caller.
    let g = unsafe { &*gp };
    let l = &pp.gfree[c];
    g.schedlink.set(l.head.get());
    l.head.set(gp);
    l.n.set(l.n.get() + 1);
    if l.n.get() >= p::gfree_max(c) {
        let mut batch: *mut G = ptr::null_mut();
        while l.n.get() > p::gfree_batch(c) {
            let g1 = l.head.get();
            // SAFETY: g1 is on our free list.
            let g1r = unsafe { &*g1 };
            l.head.set(g1r.schedlink.get());
            l.n.set(l.n.get() - 1);
            g1r.schedlink.set(batch);
            batch = g1;
        }
        let mut s = GFREE.lock();
        while !batch.is_null() {
            // SAFETY: batch is our private list.
            let next = unsafe { (*batch).schedlink.get() };
            s.gfree_push(c, batch);
            batch = next;
        }
    }
}

/// Mirrors of the global free list lengths per stack class, read without
/// GFREE (written under it). Relaxed: a hint whether to take the lock;
/// the lists are read under it.
static NGFREE: [AtomicI32; stack::NCLASS] = [const { AtomicI32::new(0) }; stack::NCLASS];

/// Whether the global hot free list may hold stacks the scavenger has not
/// released yet. Set under GFREE when a G is listed, cleared under it
/// when the scavenger empties the list; read without the lock by sysmon
/// (Relaxed: a stale true costs one empty scavenge pass, a stale false
/// delays the next pass to sysmon's next wake-up).
static GFREE_HOT: AtomicBool = AtomicBool::new(false);

/// Whether free stacks wait for the scavenger (sysmon, lock-free hint).
pub(crate) fn gfree_hot() -> bool {
    GFREE_HOT.load(Ordering::Relaxed)
}

/// Go's gfget: a dead G from `pp`'s free list of stack class `c`
/// (refilled from the global list of that class), or null. A G of class
/// `c >= 1` has a stack of exactly `stack::class_size(c)`; one of class 0
/// has a default-size stack or none (its unpooled stack was freed). Owner P
/// only. Inlined so that newproc's default spawn (constant 0) costs what a
/// single list did.
#[inline(always)]
pub(crate) fn gfget(pp: &P, c: usize) -> *mut G {
    let l = &pp.gfree[c];
    // Relaxed: a racy hint; the list itself is read under the lock.
    if l.head.get().is_null() && NGFREE[c].load(Ordering::Relaxed) > 0 {
        gfget_refill(pp, c);
    }
    let gp = l.head.get();
    if gp.is_null() {
        return gp;
    }
    // SAFETY: gp is on our free list.
    let next = unsafe { (*gp).schedlink.get() };
    l.head.set(next);
    l.n.set(l.n.get() - 1);
    // The next spawn will write that G; its line often sits in the cache
    // of the P that freed it. Fetch it now, a whole spawn ahead, instead
    // of in series then (a no-op on null).
    crate::arch::prefetch_write(next as usize);
    gp
}

/// Moves up to `p::gfree_batch(c)` Gs from the global list of class `c`
/// to `pp`'s (under GFREE). Owner P only.
#[inline(never)]
fn gfget_refill(pp: &P, c: usize) {
    let l = &pp.gfree[c];
    let mut s = GFREE.lock();
    while l.n.get() < p::gfree_batch(c) {
        let gp = s.gfree_pop(c);
        if gp.is_null() {
            break;
        }
        // SAFETY: now ours.
        unsafe { (*gp).schedlink.set(l.head.get()) };
        l.head.set(gp);
        l.n.set(l.n.get() + 1);
    }
}

/// A dead G from the global free list of stack class `c` (for spawns from
/// plain threads).
pub(crate) fn gfget_global(c: usize) -> *mut G {
    GFREE.lock().gfree_pop(c)
}

// ---------------------------------------------------------------------------
// Putting Gs on queues.

/// Go's runqput on the current M's P, spilling to the global queue.
/// Owner P only.
pub(crate) fn runqput(pp: &P, gp: *mut G, next: bool) {
    pp.runq.put(gp, next, |batch| {
        let mut s = SCHED.lock.lock();
        for &g in batch {
            s.globrunqput(g);
        }
    });
}

/// Puts a runnable G on the global queue and wakes an M. Any thread.
pub(crate) fn globrunqput_and_wake(gp: *mut G) {
    SCHED.lock.lock().globrunqput(gp);
    wakep();
}

// ---------------------------------------------------------------------------
// M management.

/// Go's wakep: wake (or create) one spinning M if there is an idle P and
/// nobody is spinning. Any thread.
pub(crate) fn wakep() {
    // StoreLoad (parking essay): the submitter's queue store above must be
    // ordered before these loads.
    fence(Ordering::SeqCst);
    if SCHED.npidle.load(Ordering::SeqCst) == 0 {
        return;
    }
    // Be conservative about spinning Ms: at most one is woken at a time.
    // SeqCst (with the fence above): the submitter's side of the essay.
    if SCHED.nmspinning.load(Ordering::SeqCst) != 0
        || SCHED
            .nmspinning
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return;
    }
    startm(ptr::null_mut(), true);
}

/// Go's startm: run `pp` (or an idle P if null) on an idle or new M. With
/// `spinning`, the caller has already incremented nmspinning and the M
/// starts spinning; if no P is available the increment is undone.
///
/// # Which idle M (a departure from Go)
///
/// Go wakes the most recently idled M. Linux puts a woken thread on its
/// previous CPU if that CPU is idle, and otherwise often on the waker's
/// CPU, even while another CPU idles (wake-affine placement; with the
/// last-level cache busy, SIS_UTIL skips the search for an idle CPU). The
/// waker is running, so the woken M then waits there for the waker's time
/// slice, up to a 4 ms tick, and the P it was handed stays idle. The most
/// recently idled M is often exactly the one that went idle on the
/// waker's CPU a moment earlier (the waker took that CPU when it slept),
/// so goro prefers an idle M that slept on another CPU (`M::idle_cpu`,
/// read with `sched_getcpu`: 2.4 ns here, where glibc reads it from rseq,
/// on paths that make a futex call anyway).
/// Measured (docs/BENCHMARKS.md, session 25): 8 UDP ping-pong pairs at
/// P=2 0.94x, 8 Unix-socket RPC clients 0.94x, HTTP c=100 1.05x req/s;
/// no workload of h8/h9/h11 or the peers' micro rows worse.
pub(crate) fn startm(mut pp: *mut P, spinning: bool) {
    // Read before the lock: without rseq or a vDSO getcpu (aarch64 with an
    // older glibc) it is a system call.
    let cpu = os::getcpu();
    let mut s = SCHED.lock.lock();
    if pp.is_null() {
        pp = s.pidleget();
        if pp.is_null() {
            // Undo the caller's increment before unlocking (as Go 1.21's
            // wakep does): an M that puts its P on the idle list after us
            // (under this lock) then reads nmspinning without our phantom
            // spinner, and re-checks the run queues (find_runnable).
            let before = if spinning {
                SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst)
            } else {
                1
            };
            drop(s);
            if before <= 0 {
                crate::throw::throw("startm: negative nmspinning");
            }
            return;
        }
    }
    let nmp = s.mget_away_from(cpu);
    if nmp.is_null() {
        drop(s);
        newm(pp, spinning);
        return;
    }
    // SAFETY: nmp is idle (asleep in stopm) and owned by us until woken.
    let m = unsafe { &*nmp };
    m.spinning.set(spinning);
    m.nextp.set(pp);
    drop(s);
    m.park.wakeup();
}

/// Idle Ms [`Synced::mget_away_from`] looks at: the list is LIFO, and
/// Ms deeper in it slept long ago (their CPU tells little).
const MGET_SCAN: usize = 4;

/// Go's newm: create an OS thread for a new M that will run `pp` (with
/// `spinning`, counted in nmspinning by the caller). Any thread. Does not
/// block on the new thread: when the caller's thread state may be unusual
/// (see "Thread creation and exit" below) the thread is created by the
/// template thread. Throws past MAX_M live Ms or if the OS refuses a thread.
fn newm(pp: *mut P, spinning: bool) {
    // Relaxed: the RMW alone makes the count exact; it orders nothing else.
    let live = SCHED.mcount.fetch_add(1, Ordering::Relaxed) as i64 + 1;
    if live > MAX_M {
        crate::throw::throwf(format_args!(
            "thread exhaustion: program exceeds {MAX_M}-thread limit"
        ));
    }
    if newm_needs_template() {
        // The template thread allocates the M as well as its thread: this
        // thread may be one whose goroutine was preempted asynchronously
        // (pinned, hence locked) at any instruction, including inside the
        // global allocator, whose thread-local state (mimalloc's heap, a
        // counting wrapper's reentrancy flag) the interrupted call is still
        // changing. M::new and the list pushes would re-enter it on this
        // thread. The request is the P itself, linked through its own
        // fields: queueing it allocates nothing.
        // SAFETY: pp is non-null (startm's) and owned by this request
        // until the new M acquires it: nothing else reads these fields.
        let p = unsafe { &*pp };
        p.newm_spinning.set(spinning);
        let mut h = NEWM_HANDOFF.lock();
        if !h.started {
            crate::throw::throw("newm: on a locked thread with no template thread");
        }
        p.newm_link.set(h.pending as *mut P);
        h.pending = pp as usize;
        if h.waiting {
            h.waiting = false;
            NEWM_WAKE.wakeup();
        }
        return;
    }
    newm1(allocm_for(pp, spinning));
}

/// The M struct for a new thread that will run `pp` (with `spinning`),
/// listed in ALLM. Allocates: only on a clean M or the template thread.
fn allocm_for(pp: *mut P, spinning: bool) -> *mut M {
    let mp = allocm();
    // SAFETY: fresh (or reinitialised) M, not yet shared.
    unsafe {
        (*mp).nextp.set(pp);
        (*mp).spinning.set(spinning);
    }
    let mut all = ALLM.lock();
    all.push(mp as usize);
    // Under ALLM's lock: trace::start/stop set every M in ALLM after
    // changing the global, so either they see this M or it sees them.
    // SAFETY: not running yet.
    unsafe { (*mp).trace.store(crate::trace::on(), Ordering::Relaxed) };
    mp
}

/// Go's newm1: start the OS thread of `mp`. Any thread whose state new
/// threads may inherit (a clean M, or the template thread).
fn newm1(mp: *mut M) {
    // SAFETY: mp is not running yet; its id is immutable.
    let id = unsafe { (*mp).id };
    extern "C" fn mstart_c(arg: *mut libc::c_void) -> *mut libc::c_void {
        mstart(arg.cast());
        ptr::null_mut()
    }
    crate::deadlock::m_thread_started();
    if let Err(e) = os::newosproc(
        &format!("goro-m{id}"),
        crate::m::G0_STACK_SIZE,
        mstart_c,
        mp.cast(),
    ) {
        crate::throw::throwf(format_args!(
            "runtime: failed to create new OS thread (have {} already): {e}",
            SCHED.mcount.load(Ordering::Relaxed)
        ));
    }
}

/// Go's allocm: an M struct for a new thread, reused from an exited M if
/// one is free (the id goes with the struct), else a new one with the next
/// id. Any thread.
fn allocm() -> *mut M {
    let free = FREEM.lock().pop();
    match free {
        Some(mp) => {
            let mp = mp as *mut M;
            // SAFETY: mp is on the free list: its thread has returned from
            // mstart and nothing else owns it (it left ALLM, the idle list
            // and every P before). Ms are never freed; racy readers holding
            // a stale pointer (sysmon, diagnostics) may still read it, which
            // `reset` allows for.
            unsafe { (*mp).reset() };
            mp
        }
        None => {
            let id = {
                let mut s = SCHED.lock.lock();
                s.mnext += 1;
                s.mnext - 1
            };
            M::new(id)
        }
    }
}

/// Whether a new M must be created by the template thread rather than by
/// the calling thread (Go: `gp.m.lockedExt != 0 || gp.m.incgo`): the caller
/// is a locked or retired M, whose thread a goroutine may have changed
/// (CPU affinity, signal mask, scheduling policy, namespaces), or a thread
/// that is not an M at all (a user's thread calling spawn, sysmon), whose
/// state goro does not know.
fn newm_needs_template() -> bool {
    let mp = getm();
    if mp.is_null() {
        return true;
    }
    // SAFETY: this thread's M; lockedg and retired are owned by it.
    let m = unsafe { &*mp };
    !m.lockedg.get().is_null() || m.retired.get()
}

/// Go's mstart: the body of every M's thread, on the thread's native stack.
/// Saves its own context in `m.mstart_buf` and switches to g0 just below
/// it to schedule; returns only when `mexit` resumes that context, so the
/// thread ends by returning from its start function (pthread frees the
/// native stack and runs thread-local destructors, as for any thread).
fn mstart(mp: *mut M) {
    setm(mp);
    // SAFETY: mp is this thread's M.
    let m = unsafe { &*mp };
    m.procid.store(os::gettid(), Ordering::Relaxed);
    crate::signal_unix::minit(m);
    m.fibers.init();
    // g0's base: below mstart's frame and the context the mcall below
    // pushes there, so g0 frames never overwrite either.
    let sp = (stack_below_caller() - MSTART_RESERVE) & !15;
    m.g0_sp.set(sp);
    // SAFETY: sp is 16-byte aligned, on this thread's own stack, with no
    // live frames below it, and g0's fiber is the thread's own (init
    // above); mstart_g0 never returns; mstart_buf lives in the M, which
    // outlives the thread.
    unsafe {
        arch::mcall(
            m.mstart_buf.as_ptr().cast::<arch::Gobuf>(),
            sp,
            m.fibers.g0(),
            mstart_g0,
            mp.cast(),
        )
    };
    // Resumed by mexit (on the thread's own fiber): the M is out of every
    // list; hand its struct back.
    m.fibers.release();
    setm(ptr::null_mut());
    FREEM.lock().push(mp as usize); // the last use of `m` by this thread
}

/// Bytes kept between mstart's frame and g0's base: room for the
/// context `arch::mcall` saves there (32 bytes on both arches).
const MSTART_RESERVE: usize = 1024;
const _: () = assert!(core::mem::size_of::<arch::SwitchFrame>() + 128 <= MSTART_RESERVE);

/// An address below the caller's stack frame (the frame of this call).
#[inline(never)]
fn stack_below_caller() -> usize {
    let probe = 0u8;
    core::hint::black_box(&probe) as *const u8 as usize
}

/// The g0 half of mstart: take the P startm handed over and schedule.
unsafe extern "C" fn mstart_g0(arg: *mut u8) -> ! {
    // SAFETY: arg is this thread's M (mstart passed it).
    let m = unsafe { &*arg.cast::<M>() };
    let pp = m.nextp.replace(ptr::null_mut());
    acquirep(m, pp);
    schedule()
}

/// Runs the deadlock check under sched.lock with the idle-M and global
/// queue counts, as `stopm`'s `mput` does (sysmon's recheck; exits the
/// process if the deadlock is now certain).
pub(crate) fn checkdead_locked() {
    let s = SCHED.lock.lock();
    crate::deadlock::checkdead(s.nmidle, s.runqsize);
}

/// Go's stopm: put the M on the idle list and sleep until startm hands it a
/// P. g0, without a P.
pub(crate) fn stopm(m: &M) {
    debug_assert!(m.p.get().is_null() && !m.spinning.get());
    m.idle_cpu.set(os::getcpu());
    {
        let mut s = SCHED.lock.lock();
        s.mput(m as *const M as *mut M);
        // Go's checkdead, from mput: the last M going idle may find a
        // deadlock (deadlock.rs). Exits the process if so.
        crate::deadlock::checkdead(s.nmidle, s.runqsize);
    }
    m.park.sleep();
    m.park.clear();
    let pp = m.nextp.replace(ptr::null_mut());
    acquirep(m, pp);
}

/// Go's acquirep: associate `pp` with `m`; pp becomes Running.
pub(crate) fn acquirep(m: &M, pp: *mut P) {
    // SAFETY: pp came from the idle list or a handoff and is now ours.
    let p = unsafe { &*pp };
    p.m.set(m as *const M as *mut M);
    p.acquiretick.set(p.acquiretick.get().wrapping_add(1));
    p.set_status(PStatus::Running);
    m.p.set(pp);
    if SCHED.sysmonwait.load(Ordering::Relaxed) {
        wake_sysmon();
    }
}

/// Wakes sysmon from its all-idle sleep: a P is busy again (Go wakes it
/// in entersyscall, exitsyscall and startTheWorld; goro whenever a P is
/// acquired, so that a goroutine that starts computing is preempted on
/// time). Also refreshes gopark's clock, which sysmon did not tick while
/// it slept (up to 60 s): a goroutine that parks before sysmon runs again
/// would be stamped with the time sysmon went to sleep (h45: `dump`'s
/// wait minutes and the shrinker's park age read that stamp). One clock
/// read per idle-to-busy turn.
#[cold]
pub(crate) fn wake_sysmon() {
    let _s = SCHED.lock.lock();
    if SCHED.sysmonwait.load(Ordering::Relaxed) {
        crate::waitreason::set_park_clock(os::nanotime());
        SCHED.sysmonwait.store(false, Ordering::Relaxed);
        SCHED.sysmonnote.wakeup();
    }
}

/// Go's releasep: disassociate the M's P; returns it.
pub(crate) fn releasep(m: &M) -> *mut P {
    let pp = m.p.replace(ptr::null_mut());
    // SAFETY: pp was ours.
    unsafe { (*pp).m.set(ptr::null_mut()) };
    pp
}

/// Go's handoffp: hand off `pp` from an M that is about to block without
/// it (syscall, locked G). Start an M if there is work; else idle it.
pub(crate) fn handoffp(pp: *mut P) {
    // SAFETY: pp is owned by the caller (released or retaken).
    let p = unsafe { &*pp };
    if !p.runq.is_empty() || SCHED.runqsize.load(Ordering::Relaxed) != 0 {
        startm(pp, false);
        return;
    }
    // No local work: if nobody is spinning or idle, start a spinner so
    // global/stealable work is found.
    if SCHED.nmspinning.load(Ordering::SeqCst) + SCHED.npidle.load(Ordering::SeqCst) == 0
        && SCHED
            .nmspinning
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        startm(pp, true);
        return;
    }
    let mut s = SCHED.lock.lock();
    if SCHED.gcwaiting.load(Ordering::Relaxed) {
        p.set_status(PStatus::Stopped);
        s.stopped_one("handoffp");
        return;
    }
    if s.runqsize != 0 {
        drop(s);
        startm(pp, false);
        return;
    }
    // If this is the last running P and nobody is polling, keep an M for
    // timers and the network.
    if SCHED.npidle.load(Ordering::Relaxed) == gomaxprocs() as i32 - 1
        && SCHED.lastpoll.load(Ordering::Relaxed) != 0
    {
        drop(s);
        startm(pp, false);
        return;
    }
    let when = p.timers.next_when();
    s.pidleput(p);
    drop(s);
    if when != 0 {
        wake_netpoller(when);
    }
}

/// Go's wakeNetPoller: make sure some M will wake by `when` to run a timer.
pub(crate) fn wake_netpoller(when: i64) {
    // Orders the new timer's `timer0_when` store (Relaxed, timer.rs
    // `add_purging`) before the loads of `lastpoll` and `poll_until`, as
    // Go's sequentially consistent timer0When does. It pairs with the
    // fence an M passes after it gives up its P and before it reads the
    // Ps' timers: either that M sees the timer, or we see its poll and
    // break it. Without it, a poller that wakes at its own deadline may
    // read the old `timer0_when` while we read `poll_until` still set and
    // skip the break: it then sleeps again past the timer (found by the
    // loom model find_runnable_model.rs; hidden on x86_64 and aarch64 by
    // the heap unlock's RMW).
    fence(Ordering::SeqCst);
    if SCHED.lastpoll.load(Ordering::SeqCst) == 0 {
        // An M is blocked in netpoll; break it if it sleeps past `when`.
        let pu = SCHED.poll_until.load(Ordering::SeqCst);
        if pu == 0 || pu > when {
            netpoll::netpoll_break();
        }
    } else {
        wakep();
    }
}

// ---------------------------------------------------------------------------
// schedule / findRunnable.

/// After a preemption (cooperative or asynchronous): the preempted G's
/// time slice is over, so whatever this P runs next starts a new one,
/// even a G from runnext, which would otherwise inherit the expired slice.
/// Not in Go, whose sysmon then sleeps up to 10 ms; goro's looks again
/// within its grace (50 µs when this was measured, 1 ms since session 24)
/// and found the successor already over its slice: in TestPingPongHog under qemu the light pair, put back
/// at runnext by the pinned hog's hand-off (`handoff_to_locked`), or the
/// main goroutine readied there by a timer, was asked to yield 0.1–0.3 ms
/// into each turn (hog:light 7–58 to 1, against about 1 before session
/// 23's sysmon change). g0, holding the M's P.
pub(crate) fn end_slice(m: &M) {
    // SAFETY: we hold the M's P; schedtick is written only by its owner.
    let p = unsafe { &*m.p.get() };
    p.schedtick.set(p.schedtick.get().wrapping_add(1));
}

/// Go's schedule: find a runnable G and run it. g0 only; never returns.
pub(crate) fn schedule() -> ! {
    // SAFETY: called on g0 of the current thread's M.
    let m = unsafe { &*getm() };
    // The trace slice of the G that stopped was ended by its park or
    // preemption event, or by gosched_m/goexit0/exitsyscall0 (no hook on
    // this path: it is the hottest of all).
    let lg = m.lockedg.get();
    if !lg.is_null() {
        // This M runs only its locked G: give the P away until it is ready.
        stoplockedm(m);
        execute(m, lg, false);
    }
    loop {
        let (gp, inherit) = find_runnable(m);
        if m.spinning.get() {
            resetspinning(m);
        }
        // SAFETY: gp is Runnable and ours.
        if !unsafe { (*gp).lockedm.get() }.is_null() {
            // Locked to another M: hand it our P and let it run gp.
            startlockedm(m, gp);
            continue;
        }
        execute(m, gp, inherit)
    }
}

/// Go's stoplockedm: the locked G of `m` is not running; hand off the P
/// and sleep until startlockedm hands a P back with the G runnable. g0.
fn stoplockedm(m: &M) {
    let pp = m.p.get();
    if !pp.is_null() {
        releasep(m);
        // SAFETY: pp was ours until releasep and nobody else has it yet.
        match handoff_to_locked(m, unsafe { &*pp }) {
            LockedHandoff::Handed => {}
            LockedHandoff::No => handoffp(pp),
        }
    }
    m.park.sleep();
    m.park.clear();
    let pp = m.nextp.replace(ptr::null_mut());
    acquirep(m, pp);
}

/// Direct hand-off for locked and pinned Gs (not in Go): if the next G
/// this P would run is locked to another, sleeping M — typically another
/// goroutine preempted in pinned mode — give the P straight to that M
/// instead of waking a third M only for it to call startlockedm. Halves
/// the thread wake-ups per pinned preemption when hogs take turns. A G
/// that is not locked goes back to the head of the P's queue. Returns
/// what happened. g0, with `pp` released by `m`.
enum LockedHandoff {
    /// The P went to the M of the next G.
    Handed,
    /// Nothing to hand directly: the caller uses handoffp.
    No,
}

fn handoff_to_locked(m: &M, pp: &P) -> LockedHandoff {
    if SCHED.gcwaiting.load(Ordering::Acquire) {
        return LockedHandoff::No;
    }
    // Due timers are run by findRunnable on the M handoffp starts; a
    // direct hand-off would skip them (and, between preempted hogs, could
    // skip them for ever).
    let w = pp.timers.next_when();
    if w != 0 && w <= os::nanotime() {
        return LockedHandoff::No;
    }
    // Nor may it skip findRunnable's fairness check of the global queue:
    // locked Gs handing the P to each other (yielding, or a channel
    // ping-pong) keep the local queue non-empty for ever, and a G readied
    // from a plain thread or a syscall would never run.
    if pp.schedtick.get() % GLOBAL_FAIRNESS_TICK == 0 && SCHED.runqsize.load(Ordering::Relaxed) != 0
    {
        return LockedHandoff::No;
    }
    let (gp, inherit) = match pp.runq.get() {
        Some(x) => x,
        None => {
            if SCHED.runqsize.load(Ordering::Relaxed) == 0 {
                return LockedHandoff::No;
            }
            let gp = SCHED.lock.lock().globrunqget(pp, 1);
            if gp.is_null() {
                return LockedHandoff::No;
            }
            (gp, false)
        }
    };
    // SAFETY: gp is Runnable and ours (dequeued).
    let lm = unsafe { (*gp).lockedm.get() };
    if lm.is_null() || ptr::eq(lm, m) {
        // Not for another M (our own G must go through findRunnable, or a
        // yielding locked G would starve the rest): back to the head of
        // the queue (runnext).
        pp.runq.put(gp, true, |batch| {
            let mut s = SCHED.lock.lock();
            for &g in batch {
                s.globrunqput(g);
            }
        });
        let _ = inherit;
        return LockedHandoff::No;
    }
    // SAFETY: lm is asleep in stoplockedm waiting for exactly this G.
    let lm = unsafe { &*lm };
    lm.nextp.set(pp as *const P as *mut P);
    lm.park.wakeup();
    LockedHandoff::Handed
}

/// Go's startlockedm: `gp` (Runnable) is locked to another M: give that M
/// our P and wake it, then stop this M. g0.
fn startlockedm(m: &M, gp: *mut G) {
    // SAFETY: gp is ours (dequeued); its lockedm is an M asleep in stoplockedm.
    let lm = unsafe { &*(*gp).lockedm.get() };
    let pp = releasep(m);
    lm.nextp.set(pp);
    lm.park.wakeup();
    stopm(m);
}

/// Go's goexit0 for a G that exits while locked: this M's thread state
/// may have been changed for that G, so the thread never runs another
/// goroutine: it gives up its P and exits (Go's mexit). g0 only.
pub(crate) fn retire_locked_m(m: &M) -> ! {
    m.lockedg.set(ptr::null_mut());
    m.retired.set(true);
    mexit(m)
}

/// Go's mexit: end the current M's thread. g0, with a P, on an M that is
/// on no idle list and runs no G. Hands the P off (which may start an M
/// through the template thread: this M is retired), frees the alternate
/// signal stack, leaves ALLM and the thread count, and resumes mstart's
/// saved context so mstart returns and the thread exits; mstart then puts
/// the struct on the free list (see "Thread creation and exit").
fn mexit(m: &M) -> ! {
    let pp = releasep(m);
    handoffp(pp);
    let (base, size) = m.gsignal.replace((0, 0));
    if size != 0 {
        let off = libc::stack_t {
            ss_sp: ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        let page = os::page_size();
        // SAFETY: we run on g0, not on the signal stack; once disabled no
        // handler can use it, so its mapping (guard page below `base`, as
        // signal_unix::minit laid it out) is ours to unmap.
        unsafe {
            libc::sigaltstack(&off, ptr::null_mut());
            libc::munmap((base - page) as *mut libc::c_void, size + page);
        }
    }
    {
        let me = m as *const M as usize;
        let mut all = ALLM.lock();
        match all.iter().position(|&x| x == me) {
            Some(i) => {
                all.swap_remove(i);
            }
            None => crate::throw::throw("mexit: m not found in allm"),
        }
    }
    // The thread is about to exit and its tid may then be reused by a new
    // thread of this process. Relaxed: racy readers (signal_m, sysmon's
    // /proc probes) take 0 as "no thread"; one that read the tid just
    // before sends at worst a spurious SIGURG to another of our threads
    // (signal_m's SAFETY comment).
    m.procid.store(0, Ordering::Relaxed);
    // Relaxed: a count; the RMW keeps it exact.
    SCHED.mcount.fetch_sub(1, Ordering::Relaxed);
    let sp = m.mstart_buf.get();
    // SAFETY: sp is mstart's context saved by its mcall on this thread's
    // native stack, above g0_sp, so no g0 frame has overwritten it, and it
    // runs on the thread's own fiber; g0's own frames (ours) are dead
    // after the switch.
    unsafe { arch::gogo(sp, m.fibers.thread()) }
}

// ---------------------------------------------------------------------------
// Thread creation and exit: the template thread and the M free list.
//
// A goroutine locked to its thread (lock_os_thread) may change that
// thread's state: CPU affinity, signal mask, scheduling policy, namespaces.
// Threads inherit such state from the thread that creates them, so an M
// that is locked (or retired, or a thread goro does not own) must not create
// Ms itself. As in Go (templateThread, newmHandoff in proc.go), a template
// thread, started with the runtime from the thread that starts it, sleeps
// on NEWM_WAKE and creates the Ms queued in NEWM_HANDOFF. Unlocked Ms
// create Ms directly (their state is the runtime's).
//
// When a locked goroutine exits, its M exits too (mexit above). The M
// struct stays allocated because other threads may hold raw pointers to it
// for racy reads; mexit removes it from ALLM and every P, it was never on
// the idle list (it was running), and mstart puts it on FREEM as its last
// act, where allocm reuses it. Locks: NEWM_HANDOFF, FREEM and ALLM are
// leaves (nothing else is taken while one is held).

/// Go's newmHandoff: Ps waiting for the template thread to create an M
/// (struct and thread) for them.
struct NewmHandoff {
    /// The first P (as an address; 0: none) of the list linked through
    /// `P::newm_link`. Not a vector of Ms as in Go: a locked M, which
    /// queues here, may be one whose goroutine was preempted inside the
    /// global allocator (`newm`), so queueing must not allocate.
    pending: usize,
    /// The template thread sleeps on NEWM_WAKE (only then is it woken, so
    /// the note sees at most one wakeup per sleep).
    waiting: bool,
    /// The template thread exists.
    started: bool,
}

static NEWM_HANDOFF: Mutex<NewmHandoff> = Mutex::new(NewmHandoff {
    pending: 0,
    waiting: false,
    started: false,
});

/// Where the template thread sleeps (Go's newmHandoff.wake).
static NEWM_WAKE: Note = Note::new();

/// Exited Ms (addresses) whose structs may be reused (Go's sched.freem,
/// without Go's freeWait: the thread pushes its M only after its last use).
static FREEM: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Go's startTemplateThread: start the template thread if it is not
/// running. Called once at runtime start, on the thread that starts the
/// runtime, so new Ms inherit that thread's state. Errors: the OS refused
/// a thread.
fn start_template_thread() -> std::io::Result<()> {
    let mut h = NEWM_HANDOFF.lock();
    if h.started {
        return Ok(());
    }
    extern "C" fn template_c(_: *mut libc::c_void) -> *mut libc::c_void {
        template_thread()
    }
    os::newosproc("goro-template", 64 << 10, template_c, ptr::null_mut())?;
    h.started = true;
    Ok(())
}

/// Go's templateThread: create the Ms of queued Ps, sleep when there are
/// none. Never returns; runs without an M or P.
fn template_thread() -> ! {
    loop {
        let head = {
            let mut h = NEWM_HANDOFF.lock();
            if h.pending == 0 {
                h.waiting = true;
                NEWM_WAKE.clear();
            }
            core::mem::replace(&mut h.pending, 0) as *mut P
        };
        if head.is_null() {
            NEWM_WAKE.sleep();
            continue;
        }
        let mut pp = head;
        while !pp.is_null() {
            // SAFETY: a P queued by newm, owned by its request; we took
            // the whole list, so its fields are ours until the new M
            // acquires the P (after newm1, which starts that M).
            let (next, spinning) = unsafe { ((*pp).newm_link.get(), (*pp).newm_spinning.get()) };
            // SAFETY: as above.
            unsafe { (*pp).newm_link.set(ptr::null_mut()) };
            newm1(allocm_for(pp, spinning));
            pp = next;
        }
    }
}

/// Go's resetspinning: this M found work; stop spinning and, if it was the
/// last spinner, wake another (parking essay).
fn resetspinning(m: &M) {
    m.spinning.set(false);
    if SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst) <= 0 {
        crate::throw::throw("resetspinning: negative nmspinning");
    }
    wakep();
}

/// Go's execute: run `gp` on this M. g0 only; never returns.
pub(crate) fn execute(m: &M, gp: *mut G, inherit: bool) -> ! {
    // SAFETY: gp is Runnable and was dequeued by us: we own it.
    let g = unsafe { &*gp };
    // Release: publishes the G's initialisation to sysmon (m.curg's doc).
    m.curg.publish(gp);
    g.m.set(m as *const M as *mut M);
    g.cas_status(GStatus::Runnable, GStatus::Running);
    g.preempt.store(false, Ordering::Relaxed);
    if m.trace.load(Ordering::Relaxed) {
        // SAFETY: we hold a P while executing; its id is immutable.
        crate::trace::slice_begin(unsafe { (*m.p.get()).id }, g.goid.get());
    }
    if g.pinned.get() != crate::g::Pin::No {
        // Back on the M it was pinned to (preempt.rs): the pin is done.
        crate::preempt::unpin(m, g);
    }
    if g.cold.get() {
        g.cold.set(false);
        prefetch_frames(g);
    }
    if !inherit {
        // SAFETY: we hold a P while executing.
        let p = unsafe { &*m.p.get() };
        p.schedtick.set(p.schedtick.get().wrapping_add(1));
    }
    // SAFETY: gp's context was saved by mcall (or by the preemption
    // trampoline's mcall) or built by newproc, which gave it its live
    // fiber; the status CAS above gave us exclusive ownership; g0's frames
    // are dead.
    unsafe { arch::gogo((*g.gobuf()).sp, g.fiber.get()) }
}

/// How far above a netpoll-readied G's saved sp `execute` prefetches
/// (bytes): the frames the G returns through when it resumes (gopark,
/// `PollDesc::wait`, the read, the caller's loop). In examples/http_hello
/// under wrk, whose loop keeps a 1 KiB header array, the whole stack in use
/// (saved sp to the stack's top) measured 1,568–1,760 bytes. One cache
/// miss after another as those frames return cost goro ~0.25 µs of user
/// time per request at 1,000 connections (docs/BENCHMARKS.md, session 19).
const COLD_FRAMES_BYTES: usize = 2048;

/// Starts fetching the `COLD_FRAMES_BYTES` above `g`'s saved sp (not past
/// its stack's top), one prefetch per 64-byte line, so the misses overlap
/// instead of arriving one frame at a time. Touches nothing a program can
/// observe (`arch::prefetch_write`).
#[inline]
fn prefetch_frames(g: &G) {
    // SAFETY: g is ours (execute) and its context is saved.
    let sp = unsafe { (*g.gobuf()).sp };
    let end = g
        .stack
        .get()
        .map_or(sp, |s| s.hi)
        .min(sp + COLD_FRAMES_BYTES);
    let mut line = sp & !63;
    while line < end {
        crate::arch::prefetch_write(line);
        line += 64;
    }
}

/// Go's findRunnable: block until there is a G to run; returns it with the
/// P held. g0 only.
fn find_runnable(m: &M) -> (*mut G, bool) {
    'top: loop {
        // SAFETY: at the top of each iteration this M holds a P.
        let pp = unsafe { &*m.p.get() };
        if SCHED.gcwaiting.load(Ordering::Acquire) {
            gcstopm(m);
            continue 'top;
        }
        let (mut now, mut poll_until, _) = pp.timers.check(0);

        // Fairness: a G from the global queue now and then, so two
        // goroutines respawning each other cannot starve it.
        if pp.schedtick.get() % GLOBAL_FAIRNESS_TICK == 0
            && SCHED.runqsize.load(Ordering::Relaxed) > 0
        {
            let gp = SCHED.lock.lock().globrunqget(pp, 1);
            if !gp.is_null() {
                return (gp, false);
            }
        }
        if let Some((gp, inherit)) = pp.runq.get() {
            return (gp, inherit);
        }
        if SCHED.runqsize.load(Ordering::Relaxed) != 0 {
            let gp = SCHED.lock.lock().globrunqget(pp, 0);
            if !gp.is_null() {
                return (gp, false);
            }
        }
        // Go's findRunnable: poll the network without blocking before
        // stealing, only if goroutines wait on sockets and no M is blocked
        // in netpoll (it would get the events anyway).
        if netpoll::has_waiters() && SCHED.lastpoll.load(Ordering::Relaxed) != 0 {
            let mut list = Vec::new();
            netpoll::netpoll(0, &mut list);
            if let Some((&gp, rest)) = list.split_first() {
                inject_glist_p(pp, rest);
                // SAFETY: netpoll handed us gp, parked on a descriptor.
                unsafe { (*gp).cas_status(GStatus::Waiting, GStatus::Runnable) };
                return (gp, false);
            }
        }

        // Spin: steal, but cap spinners at half the busy Ps.
        let procs = gomaxprocs() as i32;
        if m.spinning.get()
            || 2 * SCHED.nmspinning.load(Ordering::SeqCst)
                < procs - SCHED.npidle.load(Ordering::SeqCst)
        {
            if !m.spinning.get() {
                m.spinning.set(true);
                SCHED.nmspinning.fetch_add(1, Ordering::SeqCst);
            }
            let (gp, inherit, tnow, w, new_work) = steal_work(m, pp, now);
            now = tnow;
            if !gp.is_null() {
                return (gp, inherit);
            }
            if new_work {
                continue 'top;
            }
            if w != 0 && (poll_until == 0 || w < poll_until) {
                poll_until = w;
            }
        }

        // Nothing to do: give up the P.
        {
            let mut s = SCHED.lock.lock();
            if SCHED.gcwaiting.load(Ordering::Acquire) {
                drop(s);
                continue 'top;
            }
            if s.runqsize != 0 {
                let gp = s.globrunqget(pp, 0);
                return (gp, false);
            }
            let p = releasep(m);
            // SAFETY: p is the P we just released.
            s.pidleput(unsafe { &*p });
        }

        let was_spinning = m.spinning.get();
        if was_spinning {
            m.spinning.set(false);
            if SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst) <= 0 {
                crate::throw::throw("findrunnable: negative nmspinning");
            }
        }
        // StoreLoad (parking essay): the decrement above (and pidleput's
        // npidle increment) must be visible before we re-check the queues,
        // or a submitter that saw us spinning (or saw no idle P) and a
        // re-check that misses its G lose the wake-up.
        fence(Ordering::SeqCst);
        // Go re-checks only in an M that was spinning. A non-spinning M
        // must too when nobody spins now: it skipped stealing because
        // nmspinning counted a spinner, and that may have been wakep's
        // transient increment, undone in startm without any re-check
        // (Go's issue 43997 names these transient increments). Then the G
        // a submitter readied while our P still looked busy (npidle 0)
        // had no one left to find it: tests/proc.rs
        // wakeup_ping_pong_no_rescue hung that way under qemu.
        if was_spinning || SCHED.nmspinning.load(Ordering::SeqCst) == 0 {
            if let Some(p2) = check_runqs_no_p() {
                acquirep(m, p2);
                m.spinning.set(true);
                SCHED.nmspinning.fetch_add(1, Ordering::SeqCst);
                continue 'top;
            }
        }
        if was_spinning {
            poll_until = check_timers_no_p(poll_until);
        }

        // Test knob (GODEBUG=gorofindrunnabledelay): hold this M between
        // choosing its deadline and electing itself the poller. Relaxed:
        // written once before any M starts.
        let delay_us = FINDRUNNABLE_DELAY_US.load(Ordering::Relaxed);
        if delay_us != 0 {
            // SeqCst: a test that sees the count knows this M is inside.
            FINDRUNNABLE_DELAYS.fetch_add(1, Ordering::SeqCst);
            os::usleep(delay_us);
        }

        // Block in netpoll until the next timer (forever if none while
        // goroutines wait on sockets), if nobody else is.
        let net = netpoll::has_waiters();
        if (poll_until != 0 || net) && SCHED.lastpoll.swap(0, Ordering::SeqCst) != 0 {
            SCHED.poll_until.store(poll_until, Ordering::SeqCst);
            if now == 0 {
                now = os::nanotime();
            }
            let delay = if poll_until == 0 {
                -1
            } else {
                (poll_until - now).max(0)
            };
            let mut list = Vec::new();
            // At most one M blocks here: the lastpoll swap above elects it
            // (Go's invariant; a second poller would sleep past the break
            // meant for the first). Checked, not assumed: SeqCst RMWs on
            // the idle path, just before a system call.
            if NETPOLL_BLOCKED.fetch_add(1, Ordering::SeqCst) != 0 {
                crate::throw::throw("findrunnable: two Ms blocked in netpoll");
            }
            netpoll::netpoll(delay, &mut list);
            NETPOLL_BLOCKED.fetch_sub(1, Ordering::SeqCst);
            SCHED.poll_until.store(0, Ordering::SeqCst);
            SCHED.lastpoll.store(os::nanotime(), Ordering::SeqCst);
            let p2 = SCHED.lock.lock().pidleget();
            if p2.is_null() {
                inject_glist(&list);
            } else {
                acquirep(m, p2);
                if let Some((&gp, rest)) = list.split_first() {
                    // SAFETY: acquired just above: ours.
                    inject_glist_p(unsafe { &*p2 }, rest);
                    // SAFETY: netpoll handed us gp, parked on a descriptor.
                    unsafe { (*gp).cas_status(GStatus::Waiting, GStatus::Runnable) };
                    return (gp, false);
                }
                if was_spinning {
                    m.spinning.set(true);
                    SCHED.nmspinning.fetch_add(1, Ordering::SeqCst);
                }
                continue 'top;
            }
        } else if poll_until != 0 {
            let pu = SCHED.poll_until.load(Ordering::SeqCst);
            if pu == 0 || pu > poll_until {
                netpoll::netpoll_break();
            }
        }
        stopm(m);
    }
}

/// `Config::findrunnable_delay_us` (a test knob; 0: off). Relaxed:
/// written in `start` before any M runs.
pub(crate) static FINDRUNNABLE_DELAY_US: AtomicU64 = AtomicU64::new(0);

/// Waits taken under that knob (test hook `__private::findrunnable_delays`).
/// SeqCst on both sides: a test that sees the count knows an M is inside.
pub(crate) static FINDRUNNABLE_DELAYS: AtomicU64 = AtomicU64::new(0);

/// Ms blocked in netpoll in find_runnable: 0 or 1 (checked there).
/// SeqCst RMWs: an assertion on the idle path; the RMWs alone make it
/// exact.
static NETPOLL_BLOCKED: AtomicI32 = AtomicI32::new(0);

/// Go's stealWork: up to STEAL_TRIES rounds over all Ps in random order;
/// the last round also runs their timers and may take their runnext.
/// Returns (G, inherit, now, earliest timer seen, new work appeared).
fn steal_work(m: &M, pp: &P, mut now: i64) -> (*mut G, bool, i64, i64, bool) {
    let n = gomaxprocs();
    let mut poll_until = 0i64;
    let mut ran_timer = false;
    for i in 0..STEAL_TRIES {
        let last = i == STEAL_TRIES - 1;
        for idx in RandomOrder::new(n, m.fastrand()) {
            if SCHED.gcwaiting.load(Ordering::Relaxed) {
                return (ptr::null_mut(), false, now, poll_until, true);
            }
            let p2 = allp(idx);
            if ptr::eq(p2, pp) {
                continue;
            }
            if last {
                let (tnow, w, ran) = p2.timers.check(now);
                now = tnow;
                if w != 0 && (poll_until == 0 || w < poll_until) {
                    poll_until = w;
                }
                if ran {
                    // Timers may have readied Gs onto our own queue.
                    if let Some((gp, inherit)) = pp.runq.get() {
                        return (gp, inherit, now, poll_until, false);
                    }
                    ran_timer = true;
                }
            }
            if p2.status() != PStatus::Idle {
                let running = p2.status() == PStatus::Running;
                if let Some(gp) = pp.runq.steal_from(&p2.runq, last, running) {
                    if crate::trace::on() {
                        crate::trace::steal(idx);
                    }
                    return (gp, false, now, poll_until, false);
                }
            }
        }
    }
    (ptr::null_mut(), false, now, poll_until, ran_timer)
}

/// Go's checkRunqsNoP: after giving up the P, find a P with work and take
/// an idle P to go after it.
fn check_runqs_no_p() -> Option<*mut P> {
    // The run queue loads (runq.rs, Acquire) follow the caller's
    // fence(SeqCst): the parker's side of the parking essay.
    for i in 0..gomaxprocs() {
        let p2 = allp(i);
        if p2.status() != PStatus::Idle && !p2.runq.is_empty() {
            let pp = SCHED.lock.lock().pidleget();
            return if pp.is_null() { None } else { Some(pp) };
        }
    }
    // SeqCst as Go's; global puts are ordered with our pidleput by the
    // lock anyway (runqsize's doc).
    if SCHED.runqsize.load(Ordering::SeqCst) != 0 {
        let pp = SCHED.lock.lock().pidleget();
        return if pp.is_null() { None } else { Some(pp) };
    }
    None
}

/// Go's checkTimersNoP: earliest timer over all Ps.
fn check_timers_no_p(mut poll_until: i64) -> i64 {
    for i in 0..gomaxprocs() {
        let w = allp(i).timers.next_when();
        if w != 0 && (poll_until == 0 || w < poll_until) {
            poll_until = w;
        }
    }
    poll_until
}

/// Go's injectglist for an M that holds `pp` (the netpoll results of
/// findRunnable): as many Gs as there are idle Ps go to the global queue,
/// with an M started for each; the rest go to `pp`'s own run queue, which
/// this M runs next and other Ps steal from. Putting all on the global
/// queue (as without a P) made a busy P's readied Gs wait for the other
/// P's next global-queue look: 8 Unix-socket RPC pairs on 2 Ps kept 1.07
/// CPUs busy against Go's 1.83, and took 1.3-1.5x Go's time.
pub(crate) fn inject_glist_p(pp: &P, list: &[*mut G]) {
    if list.is_empty() {
        return;
    }
    let idle = (SCHED.npidle.load(Ordering::SeqCst) as usize).min(list.len());
    let (global, local) = list.split_at(idle);
    if !global.is_empty() {
        inject_glist(global);
    }
    for &gp in local {
        // SAFETY: netpoll handed us these Gs.
        unsafe { (*gp).cas_status(GStatus::Waiting, GStatus::Runnable) };
        runqput(pp, gp, false);
    }
}

/// Go's injectglist: make Gs readied without a P runnable: onto the global
/// queue, and start Ms for idle Ps.
pub(crate) fn inject_glist(list: &[*mut G]) {
    if list.is_empty() {
        return;
    }
    {
        let mut s = SCHED.lock.lock();
        for &gp in list {
            // SAFETY: netpoll handed us these Gs.
            unsafe { (*gp).cas_status(GStatus::Waiting, GStatus::Runnable) };
            s.globrunqput(gp);
        }
    }
    let idle = SCHED.npidle.load(Ordering::SeqCst) as usize;
    for _ in 0..idle.min(list.len()) {
        startm(ptr::null_mut(), false);
    }
}

/// Go's stealOrder: visits 0..n in a random order, using a random start
/// and a random step coprime to n.
struct RandomOrder {
    n: usize,
    pos: usize,
    inc: usize,
    left: usize,
}

impl RandomOrder {
    fn new(n: usize, r: u32) -> RandomOrder {
        let n = n.max(1);
        // Find a step coprime with n, starting from a random candidate.
        let mut inc = (r as usize >> 8) % n + 1;
        while gcd(inc, n) != 1 {
            inc = inc % n + 1;
        }
        RandomOrder {
            n,
            pos: r as usize % n,
            inc,
            left: n,
        }
    }
}

impl Iterator for RandomOrder {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.pos;
        self.pos = (self.pos + self.inc) % self.n;
        Some(p)
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

// ---------------------------------------------------------------------------
// Stop the world and procresize (GOMAXPROCS changes).

/// Go's gcstopm: this M's P is wanted for stop-the-world. g0 only.
fn gcstopm(m: &M) {
    if m.spinning.get() {
        m.spinning.set(false);
        SCHED.nmspinning.fetch_sub(1, Ordering::SeqCst);
    }
    let pp = releasep(m);
    {
        let mut s = SCHED.lock.lock();
        // SAFETY: pp was ours.
        unsafe { (*pp).set_status(PStatus::Stopped) };
        s.stopped_one("gcstopm");
    }
    stopm(m);
}

/// Go's stopTheWorld + procresize + startTheWorld: change the number of Ps
/// while goroutines run. Returns the previous GOMAXPROCS. Blocks the calling
/// thread (or G's M) until every P has stopped at a scheduling point:
/// goroutines that never yield delay it (cooperative, as Go before 1.14).
pub(crate) fn set_max_procs(n: usize) -> usize {
    let old = gomaxprocs();
    if n == 0 || n == old {
        return old;
    }
    let n = n.min(MAX_PROCS);
    // Go's worldsema: one stop-the-world at a time. A goroutine must not
    // block its M (holding a P) here, or a concurrent STW waits on that P
    // forever: it yields instead, letting its P stop.
    let _stw = loop {
        if let Some(g) = SCHED.stw.try_lock() {
            break g;
        }
        if crate::park::in_goroutine() {
            crate::park::gosched();
        } else {
            os::usleep(20);
        }
    };
    // Go's stopTheWorld runs with m.preemptoff set: enter the critical
    // section before reading our P, so that no preemption moves the G to
    // another M and no reacquire changes m.p between the read and the
    // stop (a detached G takes its P back first, inside the section).
    let mp = crate::preempt::acquirem_with_p();
    // The caller's own P (when called from a goroutine) stays ours; null
    // on a plain thread or inside a syscall guard (that P is stopped).
    // SAFETY: mp is this thread's M, if any; m.p is ours in the section.
    let own = unsafe { mp.as_ref() }.map_or(ptr::null_mut(), |m| m.p.get());
    stop_the_world(own);
    {
        let mut s = SCHED.lock.lock();
        let runnable = procresize(&mut s, n as i32, own);
        // Go's startTheWorldWithSema clears gcwaiting in the critical
        // section that ran procresize: procresize has just put Ps on the
        // idle list, and an M that took one of them while gcwaiting still
        // read true would stop it (gcstopm) uncounted. That P stayed
        // Stopped with no M, and the next stop-the-world waited for it
        // forever (tests/proc.rs resize_while_running, 1 run in ~50
        // under qemu).
        SCHED.gcwaiting.store(false, Ordering::SeqCst);
        drop(s);
        start_the_world(runnable);
    }
    crate::m::releasem(mp);
    old
}

/// Go's stopTheWorldWithSema: stop every P except `own`.
fn stop_the_world(own: *mut P) {
    let mut s = SCHED.lock.lock();
    let procs = gomaxprocs();
    s.stopwait = procs as i32 - i32::from(!own.is_null());
    SCHED.gcwaiting.store(true, Ordering::SeqCst);
    // Ask running goroutines to yield (Go's preemptall): the flag for
    // their next runtime entry, and SIGURG for those that never enter it.
    for i in 0..procs {
        let p = allp(i);
        if !ptr::eq(p, own) {
            crate::preempt::preemptone(p);
        }
        // Ps in a syscall are taken directly.
        if p.cas_status(PStatus::Syscall, PStatus::Stopped) {
            s.stopwait -= 1;
        }
    }
    // Idle Ps are taken off the idle list.
    loop {
        let pp = s.pidleget();
        if pp.is_null() {
            break;
        }
        // SAFETY: taken from the idle list: ours.
        unsafe { (*pp).set_status(PStatus::Stopped) };
        s.stopwait -= 1;
    }
    let wait = s.stopwait > 0;
    drop(s);
    if wait {
        // Spinning/idle Ms notice gcwaiting at the top of findRunnable; an
        // M blocked in netpoll must be woken to notice.
        netpoll::netpoll_break();
        let mut rounds = 0u32;
        loop {
            if SCHED.stopnote.sleep_timeout(100_000) {
                break;
            }
            netpoll::netpoll_break();
            rounds += 1;
            for i in 0..procs {
                let p = allp(i);
                // A G may have taken its P back from a syscall since, or a
                // signal found no safe point: ask again (Go's preemptall in
                // the same loop). After 10 ms, a G whose pc is outside the
                // executable (a loop in libc) has its P detached instead,
                // which this loop then takes.
                if p.status() == PStatus::Running && !ptr::eq(p, own) {
                    if rounds >= 100 {
                        crate::preempt::preempt_or_detach(p);
                    } else {
                        crate::preempt::preemptone(p);
                    }
                }
                if p.cas_status(PStatus::Syscall, PStatus::Stopped) {
                    SCHED.lock.lock().stopped_one("stopTheWorld");
                }
            }
        }
        SCHED.stopnote.clear();
    }
    let s = SCHED.lock.lock();
    if s.stopwait != 0 {
        crate::throw::throw("stopTheWorld: not stopped");
    }
}

/// Go's procresize: set the number of Ps to `nprocs`. Called at start (no
/// Ps yet) or with the world stopped. Returns the Ps that have local work and
/// need an M. `own` (the caller's P, or null) stays with the caller.
fn procresize(s: &mut MutexGuard<'_, Synced>, nprocs: i32, own: *mut P) -> Vec<*mut P> {
    let old = gomaxprocs();
    let n = nprocs.clamp(1, MAX_PROCS as i32) as usize;
    for (i, slot) in ALLP.iter().enumerate().take(n) {
        // Acquire: as in `allp` (procresize callers are serialised anyway).
        if slot.load(Ordering::Acquire).is_null() {
            // Release: publishes the initialised P to every reader of ALLP.
            slot.store(P::new(i), Ordering::Release);
        }
    }
    // Destroy Ps beyond n: move their work to the global queue, their
    // timers and free Gs to P 0.
    let p0 = allp(0);
    for i in n..old {
        let p = allp(i);
        p.runq.drain(|gp| s.globrunqputhead(gp));
        p.timers.move_all(&p0.timers);
        let mut gf = GFREE.lock();
        for (c, l) in p.gfree.iter().enumerate() {
            loop {
                let gp = l.head.get();
                if gp.is_null() {
                    break;
                }
                // SAFETY: gp is on p's free list and the world is stopped.
                l.head.set(unsafe { (*gp).schedlink.get() });
                gf.gfree_push(c, gp);
            }
            l.n.set(0);
        }
        p.set_status(PStatus::Dead);
    }
    SCHED.gomaxprocs.store(n as i32, Ordering::SeqCst);
    // If our own P is being destroyed, take P 0 instead (Go does the same).
    let mp = getm();
    if !own.is_null() {
        // SAFETY: own is our P.
        let ownp = unsafe { &*own };
        if ownp.id >= n {
            // SAFETY: mp is our M (own is non-null only on an M).
            let m = unsafe { &*mp };
            m.p.set(ptr::null_mut());
            let p0m = allp(0) as *const P as *mut P;
            acquirep(m, p0m);
        }
    }
    let cur = crate::m::getp();
    let mut runnable = Vec::new();
    for i in (0..n).rev() {
        let p = allp(i) as *const P as *mut P;
        if p == cur {
            continue;
        }
        // SAFETY: world stopped: all these Ps are ours.
        let pr = unsafe { &*p };
        if pr.runq.is_empty() {
            s.pidleput(pr);
        } else {
            pr.set_status(PStatus::Stopped);
            runnable.push(p);
        }
    }
    runnable
}

/// Go's startTheWorldWithSema: restart Ps with work and wake spinners.
/// gcwaiting is already clear (see set_max_procs).
fn start_the_world(runnable: Vec<*mut P>) {
    for p in runnable {
        startm(p, false);
    }
    wakep();
}

// ---------------------------------------------------------------------------
// Statistics.

/// Racy snapshot of the scheduler for `goro::stats()` and schedtrace.
pub(crate) fn snapshot() -> crate::Stats {
    let procs = gomaxprocs();
    let (runq, nmidle) = {
        // A runtime lock taken on a user G (`goro::stats()`): inside a
        // critical section, or an asynchronous preemption landing while it
        // is held parks the G through gopreempt_m, which takes sched.lock
        // again on the same thread (found as a hang of
        // preempt::user_sigurg under qemu, ~1 run in 40: the test polls
        // `stats()` beside hogs preempted every 500 µs).
        let _ml = crate::m::MLock::new();
        let s = SCHED.lock.lock();
        (s.runqsize as usize, s.nmidle as usize)
    };
    // Relaxed throughout: statistics, read racily.
    crate::Stats {
        gomaxprocs: procs,
        idle_procs: SCHED.npidle.load(Ordering::Relaxed).max(0) as usize,
        threads: SCHED.mcount.load(Ordering::Relaxed) as usize,
        spinning_threads: SCHED.nmspinning.load(Ordering::Relaxed).max(0) as usize,
        idle_threads: nmidle,
        global_runq: runq,
        local_runq: (0..procs).map(|i| allp(i).runq.len()).collect(),
        goroutines: gcount(),
        preemptions: crate::sysmon::PREEMPTIONS.load(Ordering::Relaxed),
        preemptions_async: crate::preempt::PREEMPTIONS_ASYNC.load(Ordering::Relaxed),
        retakes_detected: crate::preempt::RETAKES_DETECTED.load(Ordering::Relaxed),
        reacquires_detected: crate::preempt::REACQUIRES.load(Ordering::Relaxed),
        preempt_signals: crate::preempt::PREEMPT_SIGNALS.load(Ordering::Relaxed),
        preempt_refused: crate::preempt::PREEMPT_REFUSED.load(Ordering::Relaxed),
        preempt_pinned_limit: crate::preempt::PREEMPT_PINNED_LIMIT.load(Ordering::Relaxed),
        pinned_threads: crate::preempt::PINNED.load(Ordering::Relaxed),
        detect_unavailable: crate::preempt::DETECT_UNAVAILABLE.load(Ordering::Relaxed),
        async_preempt_static_libc: crate::preempt::STATIC_LIBC.load(Ordering::Relaxed),
        syscalls_handed_off: crate::sysmon::HANDOFFS.load(Ordering::Relaxed),
        stacks_reserved: stack::STACKS_RESERVED.load(Ordering::Relaxed),
    }
}

/// Ps a stop-the-world still waits for (Go's sched.stopwait), for
/// scheddetail.
pub(crate) fn stopwait() -> i32 {
    // Critical section: may run on a user G (see `snapshot`).
    crate::m::lock_rt(&SCHED.lock).stopwait
}

/// An idle P, taken under sched.lock, if any.
pub(crate) fn pidleget_locked() -> Option<*mut P> {
    let pp = SCHED.lock.lock().pidleget();
    if pp.is_null() {
        None
    } else {
        Some(pp)
    }
}

/// Returns the pages of up to `max` stacks on the global hot free lists
/// (every size class) to the OS (`MADV_DONTNEED` of all but the top page)
/// and moves them to the cold lists, skipping a class from which spawns
/// took stacks since the previous call (a pool in use stays hot; Go's
/// scavenger likewise returns memory that has not been used recently).
/// Returns whether hot stacks remain in the classes it may scavenge now.
/// Called by sysmon, without a P, in small batches so a long list never
/// keeps sysmon from its other duties; GFREE is not held across the
/// system calls.
pub(crate) fn scavenge_gfree(max: usize) -> bool {
    const _: () = assert!(stack::NCLASS <= 32, "in_use below is a u32 bit set");
    let mut batch: Vec<(usize, *mut G)> = Vec::with_capacity(max);
    // Classes in use (bit c): left alone until the next period.
    let mut in_use = 0u32;
    {
        let mut s = GFREE.lock();
        for (c, l) in s.l.iter_mut().enumerate() {
            if l.pops != l.pops_seen {
                // Spawns took stacks from this pool since the last look:
                // it is in use, and releasing its pages would make each
                // reuse fault them back in. Look again next period.
                l.pops_seen = l.pops;
                in_use |= 1 << c;
                continue;
            }
            while batch.len() < max && !l.hot.is_null() {
                let gp = l.hot;
                // SAFETY: on the hot list, owned under the lock.
                l.hot = unsafe { (*gp).schedlink.get() };
                l.n -= 1;
                batch.push((c, gp));
            }
            NGFREE[c].store(l.n, Ordering::Relaxed);
        }
    }
    for &(_, gp) in &batch {
        // SAFETY: detached from the list: ours alone.
        if let Some(st) = unsafe { (*gp).stack.get() } {
            st.release_below(os::page_size());
        }
    }
    if !batch.is_empty() && crate::trace::on() {
        crate::trace::scavenge(batch.len());
    }
    let mut s = GFREE.lock();
    for (c, gp) in batch {
        let l = &mut s.l[c];
        // SAFETY: ours until listed.
        unsafe { (*gp).schedlink.set(l.cold) };
        l.cold = gp;
        l.n += 1;
        NGFREE[c].store(l.n, Ordering::Relaxed);
    }
    // More to do now: hot stacks in a class not in use. Hot stacks in a
    // class in use wait for the next period (GFREE_HOT stays set).
    let more =
        s.l.iter()
            .enumerate()
            .any(|(c, l)| !l.hot.is_null() && in_use & (1 << c) == 0);
    GFREE_HOT.store(s.l.iter().any(|l| !l.hot.is_null()), Ordering::Relaxed);
    more
}

#[cfg(test)]
mod tests {
    use super::{RandomOrder, Synced, MGET_SCAN};
    use crate::m::M;
    use core::ptr;

    /// mget_away_from takes the first of the first MGET_SCAN idle Ms that
    /// slept on another CPU, unlinks exactly that one, and falls back to
    /// the LIFO head; nmidle stays exact.
    #[test]
    fn mget_away_from_prefers_another_cpu() {
        let mut s = Synced::new();
        // Idle on CPUs (pushed in this order; the list is LIFO):
        // m0:1, m1:0, m2:0, m3:1 -> list m3, m2, m1, m0.
        let ms: Vec<*mut M> = (0..4).map(|i| M::new(1000 + i)).collect();
        for (&mp, cpu) in ms.iter().zip([1, 0, 0, 1]) {
            // SAFETY: fresh Ms owned by this test.
            unsafe { (*mp).idle_cpu.set(cpu) };
            s.mput(mp);
        }
        // From CPU 1: m3 slept there, m2 did not.
        assert_eq!(s.mget_away_from(1), ms[2]);
        assert_eq!(s.nmidle, 3);
        // From CPU 0: the head m3 slept on CPU 1.
        assert_eq!(s.mget_away_from(0), ms[3]);
        // From CPU 0 again: m1 slept there, m0 did not.
        assert_eq!(s.mget_away_from(0), ms[0]);
        // Only m1 (CPU 0) left: the fallback takes it anyway.
        assert_eq!(s.mget_away_from(0), ms[1]);
        assert_eq!(s.nmidle, 0);
        assert!(s.mget_away_from(0).is_null());
        // An unknown CPU (-1) takes the head, as Go's mget.
        for &mp in &ms {
            s.mput(mp);
        }
        assert_eq!(s.mget_away_from(-1), ms[3]);
        // Past MGET_SCAN entries the head is taken even if a later M fits.
        let mut t = Synced {
            midle: ptr::null_mut(),
            nmidle: 0,
            ..s
        };
        let extra: Vec<*mut M> = (0..MGET_SCAN as i64 + 1)
            .map(|i| M::new(2000 + i))
            .collect();
        for (k, &mp) in extra.iter().enumerate() {
            // SAFETY: as above. The first pushed (deepest) is on CPU 1.
            unsafe { (*mp).idle_cpu.set(if k == 0 { 1 } else { 0 }) };
            t.mput(mp);
        }
        assert_eq!(t.mget_away_from(0), extra[MGET_SCAN]);
        for mp in ms.into_iter().chain(extra) {
            // SAFETY: the Ms were never started and nothing refers to them.
            drop(unsafe { Box::from_raw(mp) });
        }
    }

    /// Go's TestStealOrder (RunStealOrderTest): for every P count up to
    /// 64 and many seeds, the steal order visits each P exactly once, and
    /// different seeds give different orders (for 3 or more Ps, at least
    /// two distinct strides: Go's "too few coprimes").
    #[test]
    fn steal_order() {
        for procs in 1..=64usize {
            let mut strides = std::collections::HashSet::new();
            let mut starts = std::collections::HashSet::new();
            for seed in 0..4096u32 {
                let r = seed.wrapping_mul(2_654_435_761);
                let ord = RandomOrder::new(procs, r);
                strides.insert(ord.inc);
                starts.insert(ord.pos);
                let mut seen = vec![false; procs];
                let mut count = 0;
                for p in ord {
                    assert!(p < procs, "procs {procs}: position {p} out of range");
                    assert!(!seen[p], "procs {procs} seed {r}: {p} visited twice");
                    seen[p] = true;
                    count += 1;
                }
                assert_eq!(count, procs, "procs {procs} seed {r}: not done");
            }
            if procs >= 3 {
                assert!(strides.len() >= 2, "procs {procs}: too few strides");
            }
            assert_eq!(
                starts.len(),
                procs,
                "procs {procs}: some start never chosen"
            );
        }
    }
}
