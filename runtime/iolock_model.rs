//! loom model of the socket direction lock (runtime/net/iolock.rs
//! `IoLock::lock`/`lock_slow`, `unlock`/`unlock_slow`, `settle_queued`,
//! `close_waiters`, `claim`, `gen_claim`, `park_commit`, `wake`; timer.rs's
//! `SelTimeout` firing; net/fd.rs `NetFd::close` setting `closing` before
//! `close_waiters`).
//!
//! A miniature in the style of the other models (sema_model.rs,
//! deadline_model.rs): the real code keeps its waiters in a process-wide
//! table of queues, parks goroutines with gopark and threads on a futex
//! `Parker`; here each step is re-stated on loom atomics and mutexes, in
//! the same order and with the same orderings, and commented with the
//! function it stands for. What is kept: the state word (`HELD | QUEUED`)
//! with its fast-path CASes; one queue (`qlock`, a loom `Mutex` over the
//! FIFO of waiter records and their outcomes; the records of one lock
//! only, so `pop` takes the first and `has` is "not empty"); each waiter's
//! generation word (`G::selgen`, or a thread's `thread_gen`) and the claim
//! CAS `2*seq` -> `2*seq + 1`; the poll descriptor's `closing`.
//!
//! Actors: a holder (the main thread), which owns the lock at the start
//! (its critical section, then `unlock`), or which keeps it (a holder parked on the poll
//! slot without a deadline: only `close` ends the waits behind it);
//! waiters, each a goroutine (gopark, a `SelTimeout` timer armed after
//! the commit when it has a deadline) or a thread (`park_deadline`, then
//! `gen_claim`, then `park`), which on success run their critical section
//! and unlock (so they are wakers too); a closer (`closing`, SeqCst, then
//! `close_waiters`); a timer runner: the clock passes the deadline (all
//! timed waiters share it) once, at some point of the interleaving, then
//! every armed timer runs, including one armed after the clock passed (the
//! real heap runs it at its next check: the runner waits while a waiter
//! is between reading the clock and arming, `arming`).
//!
//! Parking is sema_model.rs's: a parked waiter sleeps on a condition
//! variable until its waker sets `woken` (goready's status CAS / the
//! Parker's flag). Waiters unlock too, so "every waker is done" is not a
//! point in one thread: the main thread, once its own part as the holder
//! is done, joins the closer and the runner, then waits until every waiter has either finished or is asleep
//! un-woken; it then sets `done` and wakes the sleepers, and one still
//! waiting panics "lost wake-up". goready of a G that is not parked, a
//! second wake-up, and an unpark of a thread waiter that already left
//! panic too.
//!
//! Properties: (1) mutual exclusion: never two holders (a counter in the
//! critical section, and a loom `UnsafeCell` written there, so that loom
//! also checks each hand-off publishes the previous critical section);
//! (2) no lost wake-up; a waiter with no deadline, on a socket not closed,
//! ends with the lock; (3) a waiter reports `Ok` only holding the lock
//! (`HELD` set); `Closed` only once `close` ran; `TimedOut` only once the
//! clock passed the deadline; (4) `QUEUED` is never left set with no
//! record queued when `qlock` is released (the essay's "cleared when it
//! was the last"); (5) at the end the state is 0 and the queue empty.
//!
//! Run with `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib
//! iolock_model` (docs/TESTING.md, "Models of the wake-up protocols").

use crate::loom_explore::spawn;
use ::loom::cell::UnsafeCell;
use ::loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use ::loom::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;

/// iolock.rs `HELD`.
const HELD: u32 = 1;
/// iolock.rs `QUEUED`.
const QUEUED: u32 = 2;

/// iolock.rs outcomes.
const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const CLOSED: u8 = 2;
const UNLINKED: u8 = 3;

/// Most waiters a scenario has.
const MAX_W: usize = 2;

/// Injected bugs, each a plausible slip in iolock.rs; every one must be
/// caught (the `loom_iolock_bug_*` tests).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Bugs {
    /// `lock_slow` checks `closing` before taking `qlock` (not under it).
    closing_before_qlock: bool,
    /// `unlock_slow` leaves a record whose claim it lost `WAITING` (no
    /// `UNLINKED`).
    unlock_keeps_waiting: bool,
    /// `close_waiters` wakes every record without claiming it.
    close_without_claim: bool,
    /// The waiter's exit unlinks its timed-out record without
    /// `settle_queued`.
    no_settle_after_timeout: bool,
}

const FIXED: Bugs = Bugs {
    closing_before_qlock: false,
    unlock_keeps_waiting: false,
    close_without_claim: false,
    no_settle_after_timeout: false,
};

/// `Stop`, and success.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Res {
    Ok,
    TimedOut,
    Closed,
}

/// What a waiter is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Kind {
    /// A goroutine (gopark), else a thread (`Parker`).
    g: bool,
    /// It has a deadline.
    timed: bool,
}

const G: Kind = Kind {
    g: true,
    timed: false,
};
const G_TIMED: Kind = Kind {
    g: true,
    timed: true,
};
const THREAD_TIMED: Kind = Kind {
    g: false,
    timed: true,
};

/// The queue (iolock.rs `Queue`): the FIFO of queued records (waiter
/// indices) and every record's `outcome`, all under `qlock`.
struct Q {
    list: VecDeque<usize>,
    outcome: [u8; MAX_W],
}

/// The model's sleeping place (gopark / the Parker's futex).
struct Park {
    /// goready / unpark happened and the waiter has not consumed it.
    woken: [bool; MAX_W],
    /// A goroutine waiter's commit is under way or done and it has not
    /// run again (goready's precondition).
    parked: [bool; MAX_W],
    /// Asleep un-woken: 1 untimed, 2 in `park_deadline` (the clock ends
    /// that sleep too).
    sleeping: [u8; MAX_W],
    /// The waiter returned from `lock` (its record and Parker are gone).
    left: [bool; MAX_W],
    /// The waiter's thread is done.
    finished: [bool; MAX_W],
    /// The clock passed the deadline (what `park_deadline` sees).
    expired: bool,
    /// Model only: see the module comment.
    done: bool,
}

/// The clock and the timer heap.
struct Timers {
    /// The clock passed the deadline (`deadline <= nanotime()`).
    expired: bool,
    /// Goroutine waiters that read the clock not expired and have not yet
    /// armed their timer (or given up arming).
    arming: usize,
    /// Armed `SelTimeout` timers: (waiter, seq).
    heap: Vec<(usize, u64)>,
}

struct Lk {
    /// `IoLock::state`.
    state: AtomicU32,
    /// The queue's `qlock` and what it guards.
    q: Mutex<Q>,
    /// `PollDesc::closing`.
    closing: AtomicBool,
    /// Each waiter's generation word (`G::selgen` / `thread_gen`).
    gen: [AtomicU64; MAX_W],
    park: Mutex<Park>,
    cv: Condvar,
    timers: Mutex<Timers>,
    tcv: Condvar,
    kinds: Vec<Kind>,
    bugs: Bugs,
    /// The critical section's data (loom checks the hand-offs order it).
    data: UnsafeCell<u32>,
    /// Bookkeeping loom does not schedule around (std atomics): holders
    /// now, `close` started, the clock passed.
    holders: std::sync::atomic::AtomicUsize,
    close_ran: std::sync::atomic::AtomicBool,
    passed: std::sync::atomic::AtomicBool,
    log: std::sync::Mutex<String>,
}

impl Lk {
    /// The lock starts held by the holder.
    fn new(kinds: &[Kind], bugs: Bugs) -> Lk {
        Lk {
            state: AtomicU32::new(HELD),
            q: Mutex::new(Q {
                list: VecDeque::new(),
                outcome: [WAITING; MAX_W],
            }),
            closing: AtomicBool::new(false),
            gen: [AtomicU64::new(0), AtomicU64::new(0)],
            park: Mutex::new(Park {
                woken: [false; MAX_W],
                parked: [false; MAX_W],
                sleeping: [0; MAX_W],
                left: [false; MAX_W],
                finished: [false; MAX_W],
                expired: false,
                done: false,
            }),
            cv: Condvar::new(),
            timers: Mutex::new(Timers {
                expired: false,
                arming: 0,
                heap: Vec::new(),
            }),
            tcv: Condvar::new(),
            kinds: kinds.to_vec(),
            bugs,
            data: UnsafeCell::new(0),
            holders: std::sync::atomic::AtomicUsize::new(0),
            close_ran: std::sync::atomic::AtomicBool::new(false),
            passed: std::sync::atomic::AtomicBool::new(false),
            log: std::sync::Mutex::new(String::new()),
        }
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        let _ = writeln!(self.log.lock().unwrap(), "  {what}");
    }

    fn fail(&self, what: std::fmt::Arguments<'_>) -> ! {
        panic!(
            "{what} ({:?})\nevents:\n{}",
            self.bugs,
            self.log.lock().unwrap()
        );
    }

    // ----- the critical section -------------------------------------------------

    /// Entering the critical section (the caller holds the lock).
    fn enter(&self, who: &str) {
        let n = self
            .holders
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n != 0 {
            self.fail(format_args!("two holders: {who} entered while held"));
        }
        // Relaxed: HELD was set by the CAS that took the lock, or stayed
        // set through a hand-off (ordered before us by qlock).
        if self.state.load(Ordering::Relaxed) & HELD == 0 {
            self.fail(format_args!("{who} holds the lock but HELD is clear"));
        }
        // SAFETY: the holder's; loom reports an access not ordered after
        // the previous holder's.
        self.data.with_mut(|d| unsafe { *d += 1 });
    }

    /// Leaving the critical section (before the unlock).
    fn exit(&self) {
        // SAFETY: as in `enter`.
        self.data.with_mut(|d| unsafe { *d += 1 });
        self.holders
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    // ----- the queue --------------------------------------------------------------

    /// `Queue::lock`.
    fn qlock(&self) -> MutexGuard<'_, Q> {
        self.q.lock().unwrap()
    }

    /// `Queue::unlock`, with property (4) checked first.
    fn qunlock(&self, q: MutexGuard<'_, Q>) {
        // Relaxed: QUEUED changes only under qlock (and no fast path can
        // succeed while it is set), so this reads its current value.
        if self.state.load(Ordering::Relaxed) & QUEUED != 0 && q.list.is_empty() {
            drop(q);
            self.fail(format_args!("QUEUED left set with no record queued"));
        }
        drop(q);
    }

    /// `Queue::unlink`.
    fn unlink(&self, q: &mut Q, i: usize) {
        match q.list.iter().position(|&j| j == i) {
            Some(k) => {
                q.list.remove(k);
            }
            // The real code throws "net: io lock waiter not queued".
            None => self.fail(format_args!("net: io lock waiter W{i} not queued")),
        }
    }

    /// `IoLock::settle_queued`.
    fn settle_queued(&self, q: &Q) {
        if q.list.is_empty() {
            // Relaxed: as iolock.rs (under qlock, the lock stays held).
            let _ = self.state.compare_exchange(
                HELD | QUEUED,
                HELD,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// iolock.rs `claim`: the CAS of the record's generation word.
    fn claim(&self, i: usize, seq: u64) -> bool {
        // AcqRel: as iolock.rs.
        self.gen[i]
            .compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    // ----- parking and waking --------------------------------------------------

    /// iolock.rs `wake`: goready (a goroutine) or `Parker::unpark`.
    fn wake(&self, i: usize, by: &str) {
        let mut p = self.park.lock().unwrap();
        if self.kinds[i].g && !p.parked[i] {
            drop(p);
            self.fail(format_args!(
                "bad wake-up: {by}: goready of W{i}, a G not parked"
            ));
        }
        if p.woken[i] {
            drop(p);
            self.fail(format_args!("bad wake-up: {by}: W{i} woken twice"));
        }
        if p.left[i] {
            drop(p);
            self.fail(format_args!(
                "bad wake-up: {by}: unpark of W{i}, which already left"
            ));
        }
        self.log(format_args!("{by} wakes W{i}"));
        p.woken[i] = true;
        p.sleeping[i] = 0;
        self.cv.notify_all();
    }

    /// Sleeps until woken (gopark after the commit; `Parker::park`), or,
    /// with `timed`, until the clock passes (`park_deadline`). Returns
    /// whether woken (and consumes the wake-up).
    fn sleep(&self, i: usize, timed: bool) -> bool {
        let mut p = self.park.lock().unwrap();
        loop {
            if p.woken[i] {
                p.woken[i] = false;
                p.parked[i] = false;
                return true;
            }
            if timed && p.expired {
                return false;
            }
            if p.done {
                drop(p);
                self.fail(format_args!(
                    "lost wake-up: W{i} still parked after every waker is done"
                ));
            }
            // Announced once (for `finish`): two sleepers announcing at
            // every wake-up would wake each other for ever.
            let s = if timed { 2 } else { 1 };
            if p.sleeping[i] != s {
                p.sleeping[i] = s;
                self.cv.notify_all();
            }
            p = self.cv.wait(p).unwrap();
        }
    }

    // ----- the clock and the timers --------------------------------------------

    /// `deadline <= nanotime()` at the top of `lock_slow`; not expired, a
    /// goroutine waiter will arm its timer (or `disarm`).
    fn deadline_passed(&self, i: usize) -> bool {
        let mut t = self.timers.lock().unwrap();
        if !t.expired && self.kinds[i].g {
            t.arming += 1;
        }
        t.expired
    }

    /// A goroutine waiter that was to arm returns without waiting.
    fn disarm(&self, i: usize) {
        if self.kinds[i].g && self.kinds[i].timed {
            let mut t = self.timers.lock().unwrap();
            t.arming -= 1;
            self.tcv.notify_all();
        }
    }

    /// time.rs `add_timer` of `park_commit`.
    fn add_timer(&self, i: usize, seq: u64) {
        let mut t = self.timers.lock().unwrap();
        t.heap.push((i, seq));
        t.arming -= 1;
        self.tcv.notify_all();
    }

    /// The clock passes the deadline, then every armed timer runs.
    fn run_timers(&self) {
        self.timers.lock().unwrap().expired = true;
        self.passed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.log(format_args!("the clock passes the deadline"));
        {
            // The futex timeouts of threads in park_deadline.
            let mut p = self.park.lock().unwrap();
            p.expired = true;
            for s in p.sleeping.iter_mut() {
                if *s == 2 {
                    *s = 0;
                }
            }
            self.cv.notify_all();
        }
        let mut t = self.timers.lock().unwrap();
        loop {
            if let Some((i, seq)) = t.heap.pop() {
                drop(t);
                // timer.rs `Action::SelTimeout`: AcqRel CAS, goready.
                if self.claim(i, seq) {
                    self.log(format_args!("timer of W{i} claims"));
                    self.wake(i, "timer");
                } else {
                    self.log(format_args!("timer of W{i} is stale"));
                }
                t = self.timers.lock().unwrap();
            } else if t.arming == 0 {
                return;
            } else {
                t = self.tcv.wait(t).unwrap();
            }
        }
    }

    // ----- the lock -------------------------------------------------------------

    /// `IoLock::lock` + `lock_slow` for waiter `i`.
    fn lock(&self, i: usize) -> Res {
        // Acquire: pairs with the Release of the previous unlock.
        if self
            .state
            .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.log(format_args!("W{i} locks (fast)"));
            return Res::Ok;
        }
        let kind = self.kinds[i];
        // `deadline.is_some_and(|d| d <= nanotime())`.
        if kind.timed && self.deadline_passed(i) {
            self.log(format_args!("W{i} times out before queueing"));
            return Res::TimedOut;
        }
        // The generation: a G's `selgen / 2 + 1`, a thread's
        // `AtomicU64::new(2)` with seq 1. Relaxed: published by qlock and
        // the heap lock.
        let seq = if kind.g {
            let s = self.gen[i].load(Ordering::Relaxed) / 2 + 1;
            self.gen[i].store(2 * s, Ordering::Relaxed);
            s
        } else {
            self.gen[i].store(2, Ordering::Relaxed);
            1
        };
        if self.bugs.closing_before_qlock && self.closing.load(Ordering::SeqCst) {
            self.disarm(i);
            return Res::Closed;
        }
        let mut q = self.qlock();
        loop {
            // Under qlock: close_waiters finds us queued or we see it.
            if !self.bugs.closing_before_qlock && self.closing.load(Ordering::SeqCst) {
                self.qunlock(q);
                self.disarm(i);
                self.log(format_args!("W{i} sees closing"));
                return Res::Closed;
            }
            // Relaxed: a guess; the CASes decide.
            match self.state.load(Ordering::Relaxed) {
                0 => {
                    if self
                        .state
                        .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.qunlock(q);
                        self.disarm(i);
                        self.log(format_args!("W{i} locks (under qlock)"));
                        return Res::Ok;
                    }
                }
                HELD => {
                    if self
                        .state
                        .compare_exchange(HELD, HELD | QUEUED, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                _ => break,
            }
        }
        q.outcome[i] = WAITING;
        q.list.push_back(i);
        self.log(format_args!("W{i} queues (seq {seq})"));
        if kind.g {
            // gopark: the G is Waiting before the commit runs.
            self.park.lock().unwrap().parked[i] = true;
            // park_commit: release qlock, then arm the deadline timer.
            self.qunlock(q);
            if kind.timed {
                self.add_timer(i, seq);
            }
            self.sleep(i, false);
        } else {
            self.qunlock(q);
            // park_deadline, then gen_claim, then park.
            if !self.sleep(i, true) {
                // gen_claim: AcqRel, as a waker's claim.
                if self.claim(i, seq) {
                    self.log(format_args!("W{i} (thread) claims its timeout"));
                } else {
                    self.log(format_args!("W{i} (thread) lost its claim: parks"));
                    cover(|c| c.thread_lost += 1);
                    self.sleep(i, false);
                }
            }
        }
        let mut q = self.qlock();
        let outcome = q.outcome[i];
        if outcome == WAITING {
            cover(|c| c.self_unlink += 1);
            self.unlink(&mut q, i);
            if !self.bugs.no_settle_after_timeout {
                self.settle_queued(&q);
            }
        }
        self.park.lock().unwrap().left[i] = true;
        self.qunlock(q);
        self.log(format_args!("W{i} leaves with outcome {outcome}"));
        match outcome {
            GRANTED => Res::Ok,
            CLOSED => Res::Closed,
            _ => Res::TimedOut,
        }
    }

    /// `IoLock::unlock` + `unlock_slow`.
    fn unlock(&self, who: &str) {
        // Release: publishes the critical section.
        if self
            .state
            .compare_exchange(HELD, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            self.log(format_args!("{who} unlocks (fast)"));
            return;
        }
        let mut q = self.qlock();
        let mut next = None;
        loop {
            let Some(i) = q.list.pop_front() else {
                // Release: as the fast unlock.
                self.state.store(0, Ordering::Release);
                self.log(format_args!("{who} unlocks (slow, nobody queued)"));
                break;
            };
            // The waiter's gen and seq, as the record holds them: the
            // claim CAS only succeeds on 2*seq, and seq is 1 for every
            // waiter's one wait here.
            if self.claim(i, 1) {
                q.outcome[i] = GRANTED;
                next = Some(i);
                self.settle_queued(&q);
                self.log(format_args!("{who} hands the lock to W{i}"));
                cover(|c| c.handoff += 1);
                break;
            }
            self.log(format_args!("{who} loses the claim of W{i}"));
            cover(|c| c.unlock_lost += 1);
            if !self.bugs.unlock_keeps_waiting {
                q.outcome[i] = UNLINKED;
            }
        }
        self.qunlock(q);
        if let Some(i) = next {
            self.wake(i, who);
        }
    }

    /// `NetFd::close`: evict's SeqCst `closing` store, then
    /// `IoLock::close_waiters`.
    fn close(&self) {
        self.close_ran
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.closing.store(true, Ordering::SeqCst);
        self.log(format_args!("close: closing set"));
        let mut q = self.qlock();
        let mut woken = Vec::new();
        while let Some(i) = q.list.pop_front() {
            if self.bugs.close_without_claim || self.claim(i, 1) {
                q.outcome[i] = CLOSED;
                woken.push(i);
                cover(|c| c.close_woke += 1);
            } else {
                q.outcome[i] = UNLINKED;
                cover(|c| c.close_lost += 1);
            }
        }
        self.settle_queued(&q);
        self.qunlock(q);
        for i in woken {
            self.wake(i, "close");
        }
    }

    /// Waiter `i`'s thread: `lock`, and with the lock its critical section
    /// and `unlock`. Checks property (3).
    fn waiter(&self, i: usize) -> Res {
        let r = self.lock(i);
        match r {
            Res::Ok => {
                self.enter(&format!("W{i}"));
                self.exit();
                self.unlock(&format!("W{i}"));
            }
            Res::Closed => {
                if !self.close_ran.load(std::sync::atomic::Ordering::Relaxed) {
                    self.fail(format_args!("W{i} closed before close ran"));
                }
            }
            Res::TimedOut => {
                if !self.kinds[i].timed || !self.passed.load(std::sync::atomic::Ordering::Relaxed) {
                    self.fail(format_args!("W{i} timed out before its deadline"));
                }
            }
        }
        let mut p = self.park.lock().unwrap();
        p.finished[i] = true;
        self.cv.notify_all();
        r
    }

    /// Every actor but the waiters is done: once each waiter has finished
    /// or sleeps un-woken, wake the sleepers so one still waiting reports
    /// the lost wake-up instead of blocking for ever.
    fn finish(&self) {
        let n = self.kinds.len();
        let mut p = self.park.lock().unwrap();
        while !(0..n).all(|i| p.finished[i] || p.sleeping[i] != 0) {
            p = self.cv.wait(p).unwrap();
        }
        p.done = true;
        self.cv.notify_all();
    }
}

/// Paths taken, counted over a whole `model` run (coverage).
#[derive(Clone, Copy, Default, Debug)]
struct Cover {
    /// unlock_slow handed the lock to a waiter.
    handoff: usize,
    /// unlock_slow lost a claim (UNLINKED).
    unlock_lost: usize,
    /// A waiter's exit found WAITING and unlinked itself.
    self_unlink: usize,
    /// A thread waiter's `gen_claim` lost: it parked for the unpark.
    thread_lost: usize,
    /// close_waiters woke a waiter.
    close_woke: usize,
    /// close_waiters lost a claim.
    close_lost: usize,
}

std::thread_local! {
    /// Model only (loom runs every model thread on the test's OS thread).
    static COVER: std::cell::Cell<Cover> = std::cell::Cell::new(Cover::default());
}

fn cover(f: impl FnOnce(&mut Cover)) {
    COVER.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    COVER.with(|c| c.set(Cover::default()));
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!(
        "{name}: {n} interleavings (preemption bound {bound:?}), {:?}",
        COVER.with(|c| c.get())
    );
}

/// The holder (the main thread) owns the lock at the start; it unlocks
/// after its critical section (`unlocks`), or keeps it to the end (parked
/// on the poll slot).
/// `waiters` race for it, `close` closes the socket, and a timer runner
/// passes the deadline if a waiter has one. `expect` checks each waiter's
/// result.
fn scenario(
    name: &'static str,
    bugs: Bugs,
    bound: Option<usize>,
    unlocks: bool,
    waiters: &'static [Kind],
    close: bool,
    expect: fn(&[Res]),
) {
    model(name, bound, bugs != FIXED, move || {
        let l = Arc::new(Lk::new(waiters, bugs));
        let ws: Vec<_> = (0..waiters.len())
            .map(|i| spawn(&l, move |l| l.waiter(i)))
            .collect();
        let c = close.then(|| spawn(&l, |l| l.close()));
        let t = waiters
            .iter()
            .any(|k| k.timed)
            .then(|| spawn(&l, |l| l.run_timers()));
        // The holder (this thread): its critical section, and the unlock.
        if unlocks {
            l.enter("holder");
            l.exit();
            l.unlock("holder");
        }
        for j in [c, t].into_iter().flatten() {
            j.join().unwrap();
        }
        l.finish();
        let rs: Vec<Res> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        if !unlocks {
            l.unlock("holder (at the end)");
        }
        // (2): no deadline, not closed: the lock.
        for (i, k) in waiters.iter().enumerate() {
            if !k.timed && !close && rs[i] != Res::Ok {
                l.fail(format_args!("W{i} (no deadline, no close) got {:?}", rs[i]));
            }
        }
        expect(&rs);
        // (5).
        let s = l.state.load(Ordering::Relaxed);
        let left = l.q.lock().unwrap().list.len();
        if s != 0 || left != 0 {
            l.fail(format_args!("end: state {s}, {left} records queued"));
        }
    });
}

fn any(_: &[Res]) {}

// ----- the fixed protocol -----------------------------------------------------

/// A holder and a goroutine waiter with a deadline: the unlock's hand-off
/// races the timer's claim.
#[test]
fn loom_iolock_timed_waiter() {
    scenario(
        "iolock timed waiter",
        FIXED,
        Some(4),
        true,
        &[G_TIMED],
        false,
        any,
    );
}

/// A holder and two goroutine waiters, the second timed: FIFO hand-off
/// (the first waiter queued gets the lock first, then passes it on), a
/// timeout unlinking from the middle or the end of the queue.
#[test]
fn loom_iolock_two_waiters() {
    scenario(
        "iolock two waiters",
        FIXED,
        Some(2),
        true,
        &[G, G_TIMED],
        false,
        any,
    );
}

/// The holder keeps the lock (parked on the poll slot without a
/// deadline); a goroutine waiter queues while the socket is closed: only
/// close can end its wait, and it must.
#[test]
fn loom_iolock_close() {
    scenario("iolock close", FIXED, None, false, &[G], true, |rs| {
        assert_eq!(rs[0], Res::Closed, "a waiter behind a kept lock");
    });
}

/// Close against an unlock's hand-off and a timer, for a timed goroutine
/// waiter: each of the three may win its wake-up.
#[test]
fn loom_iolock_close_vs_unlock() {
    scenario(
        "iolock close vs unlock",
        FIXED,
        Some(2),
        true,
        &[G_TIMED],
        true,
        any,
    );
}

/// A thread waiter with a deadline: `park_deadline` times out against the
/// hand-off; `gen_claim` lost, it parks for the unpark.
#[test]
fn loom_iolock_thread_timeout() {
    scenario(
        "iolock thread timeout",
        FIXED,
        Some(4),
        true,
        &[THREAD_TIMED],
        false,
        any,
    );
}

// ----- broken variants: loom finds each ---------------------------------------

#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_iolock_bug_closing_before_qlock() {
    scenario(
        "bug closing_before_qlock",
        Bugs {
            closing_before_qlock: true,
            ..FIXED
        },
        Some(1),
        false,
        &[G],
        true,
        any,
    );
}

#[test]
#[should_panic(expected = "not queued")]
fn loom_iolock_bug_unlock_keeps_waiting() {
    scenario(
        "bug unlock_keeps_waiting",
        Bugs {
            unlock_keeps_waiting: true,
            ..FIXED
        },
        Some(2),
        true,
        &[G_TIMED],
        false,
        any,
    );
}

#[test]
#[should_panic(expected = "bad wake-up")]
fn loom_iolock_bug_close_without_claim() {
    scenario(
        "bug close_without_claim",
        Bugs {
            close_without_claim: true,
            ..FIXED
        },
        Some(1),
        false,
        &[G_TIMED],
        true,
        any,
    );
}

#[test]
#[should_panic(expected = "QUEUED left set")]
fn loom_iolock_bug_no_settle_after_timeout() {
    scenario(
        "bug no_settle_after_timeout",
        Bugs {
            no_settle_after_timeout: true,
            ..FIXED
        },
        Some(2),
        true,
        &[G_TIMED],
        false,
        any,
    );
}
