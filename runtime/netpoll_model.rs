//! loom model of the netpoller's poll-descriptor protocol (runtime/netpoll.rs:
//! the essay at its top, `PollDesc::wait`, `block_commit`, `unblock`,
//! `netpoll`, `evict`, `free`/`open`, `deadline_fired`; runtime/net/fd.rs:
//! `NetFd::io_with`'s retry loop with its readiness-tick re-check and
//! `stream_read`'s short-read fast path).
//!
//! A miniature, as the spinning-M and semaphore models are
//! (spinning_model.rs, sema_model.rs): the real code parks goroutines with
//! gopark on g0 and learns readiness from epoll, so loom cannot run it.
//! Here each reader G is a loom thread that re-states the protocol step by
//! step on loom atomics, in the same order and with the same orderings,
//! every step commented with the real function and line (netpoll.rs:N,
//! fd.rs:N) it stands for. What is kept:
//!
//! - the poll descriptor (`Pd`): `closing`, the read slot `rg` (PD_NIL,
//!   PD_READY, PD_WAIT, or a G, here `PD_WAIT + 1 + id`), `rseq`, `rtick`,
//!   `rclosed`, `fdseq`, and `NETPOLL_WAITERS`; the write side (`wg`,
//!   `wseq`, `wtick`) is the same code on other fields and is left out;
//! - the kernel (`Kernel`, under one loom `Mutex`: the socket lock and
//!   epoll's ready-list lock): the receive queue as a count of bytes, a
//!   FIN, and the fd's epoll entry, edge-triggered: an arrival sets `edge`
//!   (a second arrival before the harvest coalesces with it, as EPOLLET
//!   does), `netpoll` takes it. A read takes min(len, queued) bytes, 0 at
//!   FIN, EAGAIN when empty;
//! - `netpoll` (a netpoller M): harvest the edge, the `fdseq` tag check,
//!   `rclosed`, the `rtick` bump, `unblock(rg, true)`, goready;
//! - a closer (`NetFd::close` -> `evict`) and the owner's drop (`free`),
//!   then the descriptor's reuse (`open`);
//! - a deadline timer: the clock and the timer heap (`Timers`, a loom
//!   `Mutex`): the clock passes the deadline once, at some point of the
//!   interleaving, and from then on every armed timer runs
//!   (`deadline_fired`: the `rseq` check, `unblock(rg, false)`, goready).
//!   (The real code serves a direction's successive timed waits with one
//!   heap entry, netpoll.rs `DeadlineTimer`, which calls `deadline_fired`
//!   with the current wait's `seq` once that wait's deadline has passed;
//!   modelled as one armed timer per timed wait; deadline_model.rs models
//!   that carrier.)
//!   A timer armed after the clock passed its deadline runs too (the real
//!   timer heap runs it at its next check), so the runner waits while a
//!   reader is between reading the clock and arming (`arming`);
//! - parking: as in sema_model.rs, a parked G sleeps on a loom `Condvar`
//!   until its waker sets `woken` (goready's status CAS); `parked` marks a
//!   G whose commit is under way or done, so a goready of a G that is not
//!   parked, or twice, panics ("readied a G that is not parked"). When
//!   every waker is done the main thread sets `done` and wakes every
//!   sleeper: one still parked then panics "lost wake-up" instead of a
//!   loom deadlock (whose panic aborts the test binary). Every scenario
//!   gives each reader something to wake for (data, FIN, close or
//!   deadline), so a reader still parked then was lost.
//!
//! Orderings. loom treats SeqCst accesses as AcqRel (only `fence(SeqCst)`
//! is sequentially consistent there), so a store-then-load pair the real
//! code makes SeqCst on both sides is written store, `fence(SeqCst)`, load
//! (sema_model.rs explains). The one such pair here is the closing race:
//! `wait` claims the slot (SeqCst CAS, netpoll.rs:424) then loads
//! `closing` (SeqCst, :432); `evict` stores `closing` (SeqCst, :366) then
//! loads the slot in `unblock` (:539). That last load was **Acquire** in
//! the code until session 27 (Go's is a sequentially consistent
//! `gpp.Load()`), so evict's side had no StoreLoad order in the language's
//! memory model, and the model of that code (`Bugs::evict_acquire_load`)
//! loses the closed reader's wake-up (`loom_netpoll_bug_evict_acquire_load`,
//! the finding written up in docs/TESTING.md). The code now makes that load
//! SeqCst, as `FIXED` does (a fence before it here). Every other order the protocol
//! needs is an RMW on the slot (all RMWs on one location are ordered) or
//! a happens-before through a lock (the kernel's socket lock between a
//! read syscall and the arrival of data it missed, fd.rs:190-194; the
//! timer heap's lock between arming and firing), and the model has those.
//!
//! Properties (checked in every scenario): (1) no lost wake-up: a reader
//! parked when data, FIN, close or its deadline comes is woken; (2) the
//! reader's result is what happened (the bytes sent, EOF only after FIN,
//! the closed error only after `evict`, the timeout only after the clock
//! passed), a woken reader that retries and gets EAGAIN parks again
//! (spurious wake-ups are counted); (3) the short-read fast path never
//! parks a reader for good when an edge came after its short read; (4) no
//! G is readied twice or when not parked, a close wakes a parked reader
//! with the closed error, and a stale event for a recycled descriptor
//! (the `fdseq` race) at most wakes the new reader spuriously; (5) the
//! slot ends NIL or READY (no claim or G left) and `NETPOLL_WAITERS` at 0.
//!
//! Run with `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib
//! netpoll_model` (docs/TESTING.md, "Models of the wake-up protocols").

use crate::loom_explore::spawn;
use ::loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use ::loom::sync::{Arc, Condvar, Mutex};

const PD_NIL: usize = 0;
const PD_READY: usize = 1;
const PD_WAIT: usize = 2;

/// The slot value of G `g` (a `*mut G` in the real code).
fn gval(g: usize) -> usize {
    PD_WAIT + 1 + g
}

/// fd.rs `DRAINED`.
const DRAINED: u64 = 1 << 32;

/// The read length of the stream readers: one byte arriving is a short
/// read.
const LEN: u32 = 2;

/// Reader Gs per scenario, at most.
const GS: usize = 2;

/// The protocol as the real code has it (`FIXED`), or with a bug put back.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bugs {
    /// The code until session 27: `unblock`'s first load of the slot is
    /// Acquire (netpoll.rs:539), so evict's SeqCst `closing` store (:366)
    /// is not ordered before it (no fence on that side).
    evict_acquire_load: bool,
    /// The claim (netpoll.rs:424) weakened to AcqRel: no StoreLoad order
    /// before the `closing` load on the reader's side.
    no_claim_fence: bool,
    /// `wait` does not check `closing` after claiming the slot
    /// (netpoll.rs:432): only io_with's check before it (fd.rs:225).
    closing_before_claim: bool,
    /// `block_commit` stores the G without checking that the slot is still
    /// WAIT (a plain store in place of the CAS, netpoll.rs:518).
    commit_no_recheck: bool,
    /// `wait` swaps its claim back to NIL only when it parked (netpoll.rs:461
    /// moved into the parking branch).
    swap_only_after_park: bool,
    /// netpoll bumps `rtick` after `unblock` instead of before
    /// (netpoll.rs:184-185 swapped).
    tick_after_unblock: bool,
    /// io_with does not compare the tick after taking the direction's lock
    /// (fd.rs:223): it always waits.
    no_tick_recheck: bool,
    /// stream_read's fast path skips the syscall even after a hang-up was
    /// seen (fd.rs:142 without `!rclosed()`).
    skip_ignores_rclosed: bool,
    /// io_with trusts a wake-up: an EAGAIN right after one is reported as
    /// EOF (in place of waiting again, fd.rs:240-243).
    eagain_after_wake_is_eof: bool,
}

const FIXED: Bugs = Bugs {
    evict_acquire_load: false,
    no_claim_fence: false,
    closing_before_claim: false,
    commit_no_recheck: false,
    swap_only_after_park: false,
    tick_after_unblock: false,
    no_tick_recheck: false,
    skip_ignores_rclosed: false,
    eagain_after_wake_is_eof: false,
};

/// netpoll.rs `PollDesc` (the read side).
struct Pd {
    closing: AtomicBool,
    rg: AtomicUsize,
    rseq: AtomicU64,
    rtick: AtomicU32,
    rclosed: AtomicBool,
    fdseq: AtomicU64,
}

/// The socket's receive queue and its epoll entry (see the module
/// comment).
#[derive(Default)]
struct Kernel {
    data: u32,
    fin: bool,
    /// An event on epoll's ready list, not harvested yet.
    edge: bool,
    /// It carries EPOLLRDHUP (a FIN arrived with or after the data).
    hup: bool,
    /// Bytes sent, FIN sent (for the checks).
    sent: u32,
}

/// The clock and the timer heap.
#[derive(Default)]
struct Timers {
    /// The clock passed the deadline (`deadline <= nanotime()`).
    expired: bool,
    /// Armed deadline timers: their `seq` (netpoll.rs `DeadlineTimer`).
    heap: Vec<u64>,
    /// A reader read the clock (not expired) and has not armed yet.
    arming: bool,
}

/// Where Gs sleep (gopark / goready).
#[derive(Default)]
struct Park {
    /// The G's commit is under way or done and no waker has readied it.
    parked: [bool; GS],
    /// goready ran (the G is Runnable).
    woken: [bool; GS],
    done: bool,
}

/// Model only: coverage of the paths the properties are about, counted
/// over a whole `model` run (loom runs every model thread on the test's OS
/// thread).
#[derive(Default, Clone, Copy, Debug)]
struct Cover {
    /// A woken G whose retry got EAGAIN and waited again (property 2).
    rewaits: usize,
    /// stream_read skipped its syscall (the fast path).
    skips: usize,
    /// ... and then parked.
    skip_parks: usize,
    /// A stale event (old `fdseq` tag) passed the tag check.
    stale_delivered: usize,
    /// ... and readied a G.
    stale_woke: usize,
    /// A commit CAS that failed (a waker got there first).
    commit_lost: usize,
    /// A deadline timer that found its generation cancelled.
    timer_stale: usize,
    /// A deadline timer that readied a G.
    timer_woke: usize,
}

std::thread_local! {
    static COVER: std::cell::Cell<Cover> = const {
        std::cell::Cell::new(Cover {
            rewaits: 0,
            skips: 0,
            skip_parks: 0,
            stale_delivered: 0,
            stale_woke: 0,
            commit_lost: 0,
            timer_stale: 0,
            timer_woke: 0,
        })
    };
}

fn cover(f: impl FnOnce(&mut Cover)) {
    COVER.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// What a read returned.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Res {
    Data(u32),
    Eof,
    Closed,
    TimedOut,
}

/// One socket's poll descriptor, kernel side, `NetFd` fields, and the
/// model's clock and sleeping place.
struct Net {
    pd: Pd,
    /// netpoll.rs `NETPOLL_WAITERS`.
    waiters: AtomicUsize,
    kernel: Mutex<Kernel>,
    /// fd.rs `NetFd::rdrained`.
    rdrained: AtomicU64,
    /// fd.rs `NetFd::rlock`.
    rlock: Mutex<()>,
    timers: Mutex<Timers>,
    tcv: Condvar,
    park: Mutex<Park>,
    cv: Condvar,
    bugs: Bugs,
    /// Event log printed with a counterexample (std, so loom does not
    /// schedule around it).
    log: std::sync::Mutex<String>,
}

impl Net {
    fn new(bugs: Bugs) -> Net {
        Net {
            pd: Pd {
                closing: AtomicBool::new(false),
                rg: AtomicUsize::new(PD_NIL),
                rseq: AtomicU64::new(0),
                rtick: AtomicU32::new(0),
                rclosed: AtomicBool::new(false),
                fdseq: AtomicU64::new(0),
            },
            waiters: AtomicUsize::new(0),
            kernel: Mutex::new(Kernel::default()),
            rdrained: AtomicU64::new(0),
            rlock: Mutex::new(()),
            timers: Mutex::new(Timers::default()),
            tcv: Condvar::new(),
            park: Mutex::new(Park::default()),
            cv: Condvar::new(),
            bugs,
            log: std::sync::Mutex::new(String::new()),
        }
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        let _ = writeln!(self.log.lock().unwrap(), "  {what}");
    }

    // ----- the kernel ---------------------------------------------------------

    /// `n` bytes (and maybe a FIN) arrive: the socket's data-ready
    /// callback queues the fd on epoll's ready list (EPOLLET: coalesces
    /// with an edge not yet harvested).
    fn arrive(&self, n: u32, fin: bool) {
        let mut k = self.kernel.lock().unwrap();
        k.data += n;
        k.sent += n;
        k.fin |= fin;
        k.hup |= fin;
        k.edge = true;
        drop(k);
        self.log(format_args!(
            "kernel: {n} byte(s) arrive (fin {fin}), edge queued"
        ));
    }

    /// recv(2) of at most `len` bytes: None is EAGAIN.
    fn sys_read(&self, len: u32) -> Option<u32> {
        let mut k = self.kernel.lock().unwrap();
        let r = if k.data > 0 {
            let n = k.data.min(len);
            k.data -= n;
            Some(n)
        } else if k.fin {
            Some(0)
        } else {
            None
        };
        drop(k);
        self.log(format_args!("read syscall: {r:?}"));
        r
    }

    // ----- the netpoller --------------------------------------------------------

    /// netpoll.rs `netpoll` for one harvested event of this descriptor
    /// tagged `tag` (the fdseq in its epoll token). `harvest`: take the
    /// event from the kernel now (epoll_wait); otherwise the caller
    /// harvested it before (a stale event, `recycle`).
    fn netpoll(&self, tag: u64, harvest: bool, hup: bool) {
        let hup = if harvest {
            let mut k = self.kernel.lock().unwrap();
            if !k.edge {
                return;
            }
            k.edge = false;
            core::mem::take(&mut k.hup)
        } else {
            hup
        };
        // netpoll.rs:173: the tag check, Acquire (pairs with free's
        // Release bump, :391).
        let seq = self.pd.fdseq.load(Ordering::Acquire);
        self.log(format_args!(
            "netpoll: event tagged {tag} (hup {hup}), fdseq reads {seq}"
        ));
        if seq != tag {
            return;
        }
        if !harvest {
            cover(|c| c.stale_delivered += 1);
        }
        // :181-183: hang-up seen (SeqCst), before the tick.
        if hup {
            self.pd.rclosed.store(true, Ordering::SeqCst);
        }
        // :184: the tick, before the slot.
        if !self.bugs.tick_after_unblock {
            self.pd.rtick.fetch_add(1, Ordering::SeqCst);
        }
        // :185 ready_cold -> unblock(rg, ioready = true).
        let g = self.unblock(true);
        if self.bugs.tick_after_unblock {
            self.pd.rtick.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(g) = g {
            if !harvest {
                cover(|c| c.stale_woke += 1);
            }
            // findRunnable's injectglist of netpoll's list.
            self.goready(g);
        }
    }

    /// netpoll.rs `unblock` (:536-557). Returns the G the caller now owns.
    fn unblock(&self, ioready: bool) -> Option<usize> {
        loop {
            // :539 Acquire (see `evict` for the StoreLoad order).
            let old = self.pd.rg.load(Ordering::Acquire);
            if old == PD_READY || (old == PD_NIL && !ioready) {
                self.log(format_args!(
                    "unblock(ioready {ioready}): slot reads {old}, nothing to do"
                ));
                return None;
            }
            let new = if ioready { PD_READY } else { PD_NIL };
            // :548-549 AcqRel: taking the G out makes us its only waker.
            if self
                .pd
                .rg
                .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.log(format_args!("unblock: slot {old} -> {new}"));
                return (old > PD_WAIT).then(|| old - PD_WAIT - 1);
            }
        }
    }

    // ----- closing, freeing, reuse ------------------------------------------------

    /// netpoll.rs `PollDesc::evict` (:364-377), read side.
    fn evict(&self) {
        self.log(format_args!("evict"));
        // :366 SeqCst: pairs with the claim in `wait`.
        self.pd.closing.store(true, Ordering::SeqCst);
        // :369 cancels armed deadline timers (wseq, :370: the write side).
        self.pd.rseq.fetch_add(1, Ordering::SeqCst);
        // :371-372 unblock(rg, false), whose first load (:539) would close
        // the StoreLoad pair if it were SeqCst (Go's is): a fence before it.
        // The real code's Acquire load (`evict_acquire_load`) has none.
        if !self.bugs.evict_acquire_load {
            fence(Ordering::SeqCst);
        }
        if let Some(g) = self.unblock(false) {
            // :373-375 goready.
            self.goready(g);
        }
    }

    /// netpoll.rs `PollDesc::free` (:382-395) then `open` (:280-325) of the
    /// recycled descriptor for a new socket: the old owner is dropped, so
    /// no G of it is inside an operation.
    fn free_and_reopen(&self) {
        self.log(format_args!("free and reopen"));
        self.evict();
        // :389 EPOLL_CTL_DEL (events already harvested stay in flight).
        // :391 Release: stale tokens now mismatch.
        self.pd.fdseq.fetch_add(1, Ordering::Release);
        // open, :305-308: Relaxed resets (epoll_ctl ADD publishes them).
        // The slot's store races with a stale event's CAS (`recycle`): it
        // is written as a Relaxed swap, which has the same outcomes in
        // Rust's memory model (one modification order per location) but
        // which loom orders with the CAS. loom's modification order is a
        // partial one: a plain store and a CAS neither of whose threads has
        // seen the other's end up unordered, and loom then lets a later
        // RMW read the store and a later load the CAS, which no total
        // order allows (a false lost wake-up, seen before this was a swap).
        self.pd.closing.store(false, Ordering::Relaxed);
        self.pd.rg.swap(PD_NIL, Ordering::Relaxed);
        self.pd.rclosed.store(false, Ordering::Relaxed);
        // The new socket and the new NetFd (fd.rs:55-63).
        *self.kernel.lock().unwrap() = Kernel::default();
        self.rdrained.store(0, Ordering::Relaxed);
    }

    // ----- the clock and the timers --------------------------------------------

    /// `deadline <= nanotime()` in io_with (fd.rs:231).
    fn expired(&self) -> bool {
        self.timers.lock().unwrap().expired
    }

    /// The same in `wait` (netpoll.rs:431); not expired: the reader will
    /// arm a timer unless it sees `closing` (`disarm`).
    fn expired_or_arming(&self) -> bool {
        let mut t = self.timers.lock().unwrap();
        if !t.expired {
            t.arming = true;
        }
        t.expired
    }

    fn disarm(&self) {
        let mut t = self.timers.lock().unwrap();
        t.arming = false;
        self.tcv.notify_all();
    }

    /// time.rs `add_timer` of netpoll.rs:440-448.
    fn add_timer(&self, seq: u64) {
        let mut t = self.timers.lock().unwrap();
        t.heap.push(seq);
        t.arming = false;
        self.tcv.notify_all();
    }

    /// The clock passes the deadline; every armed timer then runs (see the
    /// module comment).
    fn run_timers(&self) {
        let mut t = self.timers.lock().unwrap();
        t.expired = true;
        loop {
            if let Some(seq) = t.heap.pop() {
                drop(t);
                self.deadline_fired(seq);
                t = self.timers.lock().unwrap();
            } else if !t.arming {
                return;
            } else {
                t = self.tcv.wait(t).unwrap();
            }
        }
    }

    /// netpoll.rs `deadline_fired` (:572-586).
    fn deadline_fired(&self, seq: u64) {
        // :581 SeqCst: a cancelled (bumped) generation is stale.
        let cur = self.pd.rseq.load(Ordering::SeqCst);
        self.log(format_args!("timer {seq} fires, rseq {cur}"));
        if cur != seq {
            cover(|c| c.timer_stale += 1);
            return;
        }
        if let Some(g) = self.unblock(false) {
            cover(|c| c.timer_woke += 1);
            self.goready(g);
        }
    }

    // ----- parking ------------------------------------------------------------

    /// park.rs `goready`.
    fn goready(&self, g: usize) {
        let mut p = self.park.lock().unwrap();
        assert!(
            p.parked[g] && !p.woken[g],
            "readied a G that is not parked (G{g}: parked {}, woken {}; {:?})",
            p.parked[g],
            p.woken[g],
            self.bugs
        );
        p.woken[g] = true;
        self.cv.notify_all();
        drop(p);
        self.log(format_args!("goready G{g}"));
    }

    /// park.rs `gopark` with `block_commit` (netpoll.rs:450-454, :514-520):
    /// the commit runs once the G is Waiting; a failed commit resumes the G
    /// at once.
    fn gopark(&self, g: usize) {
        // The G is Waiting from here (a waker that takes it out of the slot
        // may ready it at once).
        self.park.lock().unwrap().parked[g] = true;
        let committed = if self.bugs.commit_no_recheck {
            self.pd.rg.store(gval(g), Ordering::SeqCst);
            true
        } else {
            // :518 SeqCst CAS WAIT -> G.
            self.pd
                .rg
                .compare_exchange(PD_WAIT, gval(g), Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        };
        self.log(format_args!("G{g}: commit {committed}"));
        let mut p = self.park.lock().unwrap();
        if !committed {
            cover(|c| c.commit_lost += 1);
            p.parked[g] = false;
            return;
        }
        // The M of a parked G goes through findRunnable, which polls only
        // if NETPOLL_WAITERS > 0 (has_waiters): it reads our own increment.
        assert!(
            self.waiters.load(Ordering::Relaxed) > 0,
            "NETPOLL_WAITERS 0"
        );
        while !p.woken[g] {
            if p.done {
                let k = self.kernel.lock().unwrap();
                panic!(
                    "lost wake-up: G{g} still parked after every waker is done \
                     (queued {}, fin {}, closing {}, slot {}; {:?})\n{}",
                    k.data,
                    k.fin,
                    self.pd.closing.load(Ordering::SeqCst),
                    self.pd.rg.load(Ordering::SeqCst),
                    self.bugs,
                    self.log.lock().unwrap()
                );
            }
            p = self.cv.wait(p).unwrap();
        }
        p.woken[g] = false;
        p.parked[g] = false;
        drop(p);
        self.log(format_args!("G{g}: runs again"));
    }

    /// Every waker is done: wake the sleepers so one still parked reports
    /// the lost wake-up.
    fn finish(&self) {
        let mut p = self.park.lock().unwrap();
        p.done = true;
        self.cv.notify_all();
    }

    // ----- the goroutine side -------------------------------------------------

    /// netpoll.rs `PollDesc::wait` (:404-466), read side, for G `g`.
    /// Returns whether it parked.
    fn wait(&self, g: usize, deadline: bool) -> bool {
        // :415-429 consume an edge or claim the slot.
        loop {
            // :417-418 AcqRel READY -> NIL.
            if self
                .pd
                .rg
                .compare_exchange(PD_READY, PD_NIL, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.log(format_args!("G{g}: wait consumes READY"));
                return false;
            }
            // :424 SeqCst NIL -> WAIT.
            match self
                .pd
                .rg
                .compare_exchange(PD_NIL, PD_WAIT, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.log(format_args!("G{g}: wait claims the slot (WAIT)"));
                    break;
                }
                Err(PD_READY) => continue,
                Err(v) => panic!("throw: netpoll: double wait on a poll descriptor (slot {v})"),
            }
        }
        // :430
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // :431
        let expired = deadline && self.expired_or_arming();
        // :432 the claim's StoreLoad order before the `closing` load.
        if !self.bugs.no_claim_fence {
            fence(Ordering::SeqCst);
        }
        let closing = !self.bugs.closing_before_claim && self.pd.closing.load(Ordering::SeqCst);
        self.log(format_args!("G{g}: closing {closing}, expired {expired}"));
        let mut parked = false;
        if !closing && !expired {
            if deadline {
                // :435 a fresh generation; :440 add_timer.
                let seq = self.pd.rseq.fetch_add(1, Ordering::SeqCst) + 1;
                self.add_timer(seq);
            }
            // :450
            self.gopark(g);
            parked = true;
            if deadline {
                // :457 cancel the timer.
                self.pd.rseq.fetch_add(1, Ordering::SeqCst);
            }
        } else if deadline && !expired {
            self.disarm();
        }
        // :461 AcqRel swap to NIL.
        if parked || !self.bugs.swap_only_after_park {
            let old = self.pd.rg.swap(PD_NIL, Ordering::AcqRel);
            assert!(
                old <= PD_WAIT,
                "throw: netpoll: corrupted poll descriptor (slot {old})"
            );
        }
        // :465
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        parked
    }

    /// netpoll.rs `consume_ready` (:474-481).
    fn consume_ready(&self) {
        let _ = self
            .pd
            .rg
            .compare_exchange(PD_READY, PD_NIL, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// fd.rs `NetFd::io_with` (:195-245), read side. `op`: the syscall
    /// (None: EAGAIN).
    fn io_with(
        &self,
        g: usize,
        deadline: bool,
        skipped_at: Option<u32>,
        mut op: impl FnMut() -> Option<u32>,
    ) -> Res {
        let res = |n: u32| if n == 0 { Res::Eof } else { Res::Data(n) };
        // :205
        if self.pd.closing.load(Ordering::SeqCst) {
            return Res::Closed;
        }
        // :208-218 the tick before the first try (skipped: the short
        // read's).
        let tick = match skipped_at {
            Some(t) => t,
            None => {
                let t = self.pd.rtick.load(Ordering::SeqCst);
                if let Some(n) = op() {
                    return res(n);
                }
                t
            }
        };
        // :219-222 the direction's lock.
        let _guard = self.rlock.lock().unwrap();
        // :223 an edge harvested since our EAGAIN: retry before waiting.
        let mut try_now =
            !self.bugs.no_tick_recheck && self.pd.rtick.load(Ordering::SeqCst) != tick;
        let mut woke = false;
        loop {
            // :225
            if self.pd.closing.load(Ordering::SeqCst) {
                return Res::Closed;
            }
            if try_now {
                // :229
                self.consume_ready();
            } else {
                // :231
                if deadline && self.expired() {
                    return Res::TimedOut;
                }
                // :234
                let parked = self.wait(g, deadline);
                if skipped_at.is_some() && !woke && parked {
                    cover(|c| c.skip_parks += 1);
                }
                if woke {
                    cover(|c| c.rewaits += 1);
                }
                woke = true;
                // :235
                if self.pd.closing.load(Ordering::SeqCst) {
                    return Res::Closed;
                }
            }
            try_now = false;
            // :240-243
            match op() {
                Some(n) => return res(n),
                None if woke && self.bugs.eagain_after_wake_is_eof => return Res::Eof,
                None => {}
            }
        }
    }

    /// fd.rs `NetFd::stream_read` (:132-157) of `LEN` bytes.
    fn stream_read(&self, g: usize, deadline: bool) -> Res {
        // :137
        let hint = self.rdrained.load(Ordering::Relaxed);
        // :141 the tick, then (:142) the sticky hang-up flag.
        let now = self.pd.rtick.load(Ordering::SeqCst);
        let skip = hint == DRAINED | u64::from(now)
            && (self.bugs.skip_ignores_rclosed || !self.pd.rclosed.load(Ordering::SeqCst));
        self.log(format_args!(
            "G{g}: stream_read: hint {hint:#x}, tick {now}: skip {skip}"
        ));
        if skip {
            cover(|c| c.skips += 1);
        }
        self.io_with(g, deadline, skip.then_some(now), || {
            // :147 the tick before the syscall.
            let t = self.pd.rtick.load(Ordering::SeqCst);
            // :148
            let r = self.sys_read(LEN);
            // :149-153 a short read drained the socket under tick t.
            if let Some(n) = r {
                if n > 0 && n < LEN {
                    self.rdrained
                        .store(DRAINED | u64::from(t), Ordering::Relaxed);
                }
            }
            r
        })
    }

    /// fd.rs `NetFd::read_io` of one datagram (no fast path).
    fn datagram_read(&self, g: usize) -> Res {
        self.io_with(g, false, None, || self.sys_read(1))
    }

    /// A reader G: stream reads until it has `want` bytes, EOF or an error.
    /// Returns the bytes read and how it ended.
    fn reader(&self, g: usize, want: u32, deadline: bool) -> (u32, Res) {
        let mut got = 0;
        loop {
            match self.stream_read(g, deadline) {
                Res::Data(n) => {
                    got += n;
                    if got >= want {
                        return (got, Res::Data(got));
                    }
                }
                r => return (got, r),
            }
        }
    }

    /// The end state (properties 2 and 5): `got` bytes read in all.
    fn check_end(&self, got: u32) {
        let rg = self.pd.rg.load(Ordering::SeqCst);
        assert!(
            rg == PD_NIL || rg == PD_READY,
            "slot left in state {rg} after its G returned ({:?})\n{}",
            self.bugs,
            self.log.lock().unwrap()
        );
        assert_eq!(
            self.waiters.load(Ordering::Relaxed),
            0,
            "NETPOLL_WAITERS not back to 0"
        );
        let k = self.kernel.lock().unwrap();
        assert_eq!(got + k.data, k.sent, "bytes read + queued != bytes sent");
    }

    fn check_eof(&self, r: Res) {
        if r == Res::Eof {
            assert!(
                self.kernel.lock().unwrap().fin,
                "spurious EOF: a read returned 0 with no FIN ({:?})\n{}",
                self.bugs,
                self.log.lock().unwrap()
            );
        }
    }

    fn check_timeout(&self, r: Res) {
        if r == Res::TimedOut {
            assert!(self.expired(), "timed out before the deadline");
        }
        if r == Res::Closed {
            assert!(
                self.pd.closing.load(Ordering::SeqCst),
                "closed error without a close"
            );
        }
    }
}

/// `bound`: None explores every interleaving; LOOM_MAX_PREEMPTIONS
/// overrides it unless `exact` (the broken variants). Prints the number of
/// interleavings and the coverage counts (with `--nocapture`).
fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    COVER.with(|c| c.set(Cover::default()));
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!(
        "{name}: {n} interleavings (preemption bound {bound:?}), {:?}",
        COVER.with(|c| c.get())
    );
}

// ----- scenarios --------------------------------------------------------------

/// One stream reader wants 2 bytes; they arrive one at a time, each
/// followed by a poll. The first read may come back short (1 of `LEN`),
/// so the next takes the fast path; a harvested edge whose byte the
/// reader's syscall already took leaves a stale READY that costs a
/// spurious wake-up (the retry gets EAGAIN and waits again).
fn data(bugs: Bugs, bound: Option<usize>) {
    model("netpoll data", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let r = spawn(&n, |n| n.reader(0, 2, false));
        for _ in 0..2 {
            n.arrive(1, false);
            n.netpoll(0, true, false);
        }
        n.finish();
        let (got, res) = r.join().unwrap();
        n.check_eof(res);
        assert_eq!(res, Res::Data(2), "reader ended with {res:?}");
        n.check_end(got);
    });
}

/// A stream reader with nothing to read; `close` (evict) under it.
fn close(bugs: Bugs, bound: Option<usize>) {
    model("netpoll close", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let r = spawn(&n, |n| n.reader(0, 1, false));
        n.evict();
        n.finish();
        let (got, res) = r.join().unwrap();
        assert_eq!(res, Res::Closed, "reader ended with {res:?}");
        n.check_end(got);
    });
}

/// A stream reader waits for 1 byte; the byte arrives (and is polled)
/// while another thread closes the socket: either result, never a hang.
fn close_vs_data(bugs: Bugs, bound: Option<usize>) {
    model("netpoll close_vs_data", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let r = spawn(&n, |n| n.reader(0, 1, false));
        let c = spawn(&n, |n| n.evict());
        n.arrive(1, false);
        n.netpoll(0, true, false);
        c.join().unwrap();
        n.finish();
        let (got, res) = r.join().unwrap();
        n.check_timeout(res);
        assert!(
            matches!(res, Res::Data(1) | Res::Closed),
            "reader ended with {res:?}"
        );
        n.check_end(got);
    });
}

/// A stream reader with a deadline wants `bytes` bytes, which arrive one
/// at a time, each followed by a poll, while the clock passes the
/// deadline. With 2 bytes the reader may wait twice, and the first wait's
/// timer (cancelled, or not yet) may fire during the second.
fn deadline(bugs: Bugs, bytes: u32, bound: Option<usize>) {
    let name = format!("netpoll deadline ({bytes} bytes)");
    model(&name, bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let r = spawn(&n, move |n| n.reader(0, bytes.max(1), true));
        if bytes > 0 {
            let t = spawn(&n, |n| n.run_timers());
            for _ in 0..bytes {
                n.arrive(1, false);
                n.netpoll(0, true, false);
            }
            t.join().unwrap();
        } else {
            n.run_timers();
        }
        n.finish();
        let (got, res) = r.join().unwrap();
        n.check_timeout(res);
        if bytes > 0 {
            assert!(
                res == Res::Data(bytes) || res == Res::TimedOut,
                "reader ended with {res:?}"
            );
        } else {
            assert_eq!(res, Res::TimedOut, "reader ended with {res:?}");
        }
        n.check_end(got);
    });
}

/// The peer sends 1 byte and its FIN (one edge, with EPOLLRDHUP): the
/// reader's read of the byte comes back short with the EOF left behind,
/// whose edge is spent; the next read must not skip its syscall.
fn hup(bugs: Bugs, bound: Option<usize>) {
    model("netpoll hup", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let r = spawn(&n, |n| n.reader(0, 2, false));
        n.arrive(1, true);
        n.netpoll(0, true, false);
        n.finish();
        let (got, res) = r.join().unwrap();
        n.check_eof(res);
        assert_eq!(
            (got, res),
            (1, Res::Eof),
            "reader ended with {got} bytes, {res:?}"
        );
        n.check_end(got);
    });
}

/// Two goroutines read one datagram each; two arrive, then one poll (one
/// edge for both). The second to take the direction's lock must retry
/// before waiting if an edge came since its EAGAIN (fd.rs io_with).
fn two_readers(bugs: Bugs, bound: Option<usize>) {
    model("netpoll two_readers", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let rs: Vec<_> = (0..2)
            .map(|g| spawn(&n, move |n| n.datagram_read(g)))
            .collect();
        n.arrive(1, false);
        n.arrive(1, false);
        n.netpoll(0, true, false);
        n.finish();
        for r in rs {
            let res = r.join().unwrap();
            assert_eq!(res, Res::Data(1), "reader ended with {res:?}");
        }
        n.check_end(2);
    });
}

/// Close under a parked reader, the owner's drop (`free`) and the
/// descriptor's reuse for a new socket, on which a new reader waits for a
/// byte. Meanwhile a netpoller processes an event it harvested for the
/// old fd before the free (the hang-up close's shutdown raised), tagged
/// with the old `fdseq`. The old reader gets the closed error; the stale
/// event may pass the tag check (nothing orders free's bump before its
/// load) and then at most readies the new reader spuriously, which
/// retries and reads its own byte.
fn recycle(bugs: Bugs, bound: Option<usize>) {
    model("netpoll recycle", bound, bugs != FIXED, move || {
        let n = Arc::new(Net::new(bugs));
        let old = spawn(&n, |n| n.reader(0, 1, false));
        let stale = spawn(&n, |n| n.netpoll(0, false, true));
        n.evict();
        let (got0, res0) = old.join().unwrap();
        assert_eq!(
            (got0, res0),
            (0, Res::Closed),
            "old reader ended with {res0:?}"
        );
        n.free_and_reopen();
        let new = spawn(&n, |n| n.reader(1, 1, false));
        n.arrive(1, false);
        n.netpoll(1, true, false);
        stale.join().unwrap();
        n.finish();
        let (got, res) = new.join().unwrap();
        assert_eq!(res, Res::Data(1), "new reader ended with {res:?}");
        n.check_end(got);
    });
}

// ----- the fixed protocol -----------------------------------------------------

#[test]
fn loom_netpoll_data() {
    data(FIXED, Some(4));
}

#[test]
fn loom_netpoll_close() {
    close(FIXED, None);
}

#[test]
fn loom_netpoll_close_vs_data() {
    close_vs_data(FIXED, Some(3));
}

#[test]
fn loom_netpoll_deadline() {
    deadline(FIXED, 0, None);
}

#[test]
fn loom_netpoll_deadline_vs_data() {
    deadline(FIXED, 1, Some(3));
}

#[test]
fn loom_netpoll_deadline_vs_two_bytes() {
    deadline(FIXED, 2, Some(2));
}

#[test]
fn loom_netpoll_hup() {
    hup(FIXED, Some(4));
}

#[test]
fn loom_netpoll_two_readers() {
    two_readers(FIXED, Some(3));
}

#[test]
fn loom_netpoll_recycle() {
    recycle(FIXED, Some(2));
}

// ----- the code before session 27's fix -----------------------------------------

/// `evict`'s Acquire load of the slot after its SeqCst `closing` store
/// (netpoll.rs `unblock` until session 27): the reader claims the slot and
/// reads `closing` false, evict's load reads the slot from before the
/// claim (NIL) and wakes nobody, the reader parks for ever
/// (docs/TESTING.md: the finding).
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_evict_acquire_load() {
    close(
        Bugs {
            evict_acquire_load: true,
            ..FIXED
        },
        Some(2),
    );
}

// ----- broken variants: loom finds each ---------------------------------------

/// The claim's StoreLoad order dropped on the reader's side.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_no_claim_fence() {
    close(
        Bugs {
            no_claim_fence: true,
            ..FIXED
        },
        Some(2),
    );
}

/// `closing` checked only before the claim: evict in between finds the
/// slot NIL and wakes nobody.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_closing_before_claim() {
    close(
        Bugs {
            closing_before_claim: true,
            ..FIXED
        },
        Some(2),
    );
}

/// The commit overwrites the READY an edge left while the slot was WAIT.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_commit_no_recheck() {
    data(
        Bugs {
            commit_no_recheck: true,
            ..FIXED
        },
        Some(2),
    );
}

/// A reader that did not park (closing seen after its claim) leaves WAIT
/// in the slot.
#[test]
#[should_panic(expected = "slot left in state")]
fn loom_netpoll_bug_swap_only_after_park() {
    close(
        Bugs {
            swap_only_after_park: true,
            ..FIXED
        },
        Some(2),
    );
}

/// The tick bumped after the slot: the second reader takes the lock,
/// sees the tick unchanged although the first consumed the edge that also
/// covered its datagram, and waits for an edge that never comes.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_tick_after_unblock() {
    two_readers(
        Bugs {
            tick_after_unblock: true,
            ..FIXED
        },
        Some(2),
    );
}

/// io_with without the tick re-check after the lock.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_no_tick_recheck() {
    two_readers(
        Bugs {
            no_tick_recheck: true,
            ..FIXED
        },
        Some(2),
    );
}

/// The fast path taken after a hang-up: the EOF behind the short read has
/// no edge left.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_netpoll_bug_skip_ignores_rclosed() {
    hup(
        Bugs {
            skip_ignores_rclosed: true,
            ..FIXED
        },
        Some(2),
    );
}

/// A woken reader trusts the wake-up: a stale READY (its edge's byte
/// already read by the syscall) read as EOF.
#[test]
#[should_panic(expected = "spurious EOF")]
fn loom_netpoll_bug_eagain_after_wake_is_eof() {
    data(
        Bugs {
            eagain_after_wake_is_eof: true,
            ..FIXED
        },
        Some(2),
    );
}
