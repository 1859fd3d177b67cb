//! loom model of the scheduler's blocking poll and timer wake-up protocol:
//! runtime/sched.rs `find_runnable`'s last block (the M that finds nothing
//! blocks in netpoll until the next timer: `lastpoll`, `poll_until`, the
//! election by `lastpoll.swap(0)`, the break of a poller that sleeps too
//! long), `wake_netpoller` (Go's wakeNetPoller), `inject_glist(_p)`;
//! runtime/netpoll.rs `netpoll_break` / `netpoll` (the break eventfd and
//! its `WAKE_SIG` dedup); runtime/timer.rs `Timers::add` / `check` /
//! `next_when` (`timer0_when`) and runtime/time.rs `add_timer`.
//!
//! A miniature, as the other models are (spinning_model.rs, sema_model.rs,
//! netpoll_model.rs): every step re-stated on loom's atomics and mutexes in
//! the real order with the real orderings, commented with the real
//! function and line (sched.rs:N, timer.rs:N, time.rs:N, netpoll.rs:N).
//! What is kept:
//!
//! - sched.lock (`Synced`: the idle-P list, the global run queue) as a
//!   loom `Mutex`; `npidle`, `nmspinning`, the `runqsize` mirror,
//!   `lastpoll`, `poll_until` as atomics; per P its status, its run queue
//!   (a count) and its timers: the heap (a loom `Mutex` over the deadlines)
//!   and `timer0_when`, written and read Relaxed as timer.rs does;
//! - the kernel (`Kernel`, one loom `Mutex` plus a `Condvar`, the kernel's
//!   own locks): the break eventfd's counter, sockets made ready (each one
//!   readies one G), and the M blocked in epoll_wait with its deadline; an
//!   M blocks there until the eventfd is readable, a socket is ready, or
//!   the clock reaches its deadline;
//! - the clock: a loom `Mutex<i64>` written only by the scenario's "time
//!   passes" steps (reading it gives no ordering with anything else, as
//!   `clock_gettime` gives none); a step wakes the epoll sleeper so that it
//!   can time out. A poll's timeout is its absolute deadline `poll_until`
//!   (the real delay is computed from a `now` read earlier, so it sleeps
//!   past `poll_until` by the time spent since: lateness, not modelled);
//! - M threads running `find_runnable` from holding a P (own timers, own
//!   queue, global queue, the non-blocking poll, the spin decision,
//!   `steal_work` with its last round over the other Ps' timers, the
//!   give-up under the lock, the nmspinning decrement and StoreLoad fence,
//!   goro's re-check rule, `check_timers_no_p`, the election and the
//!   blocking poll, taking a P back, `inject_glist(_p)`, the break of a
//!   poller that sleeps past our timer, `stopm`);
//! - goroutines adding timers on the P they run on (`add_timer` ->
//!   `Timers::add` -> `wake_netpoller`), which then keep running (their P
//!   stays busy for the whole scenario) or park and schedule (`sleep`).
//!
//! Abstractions. A timer only records that it ran (timers that ready Gs
//! are the spinning model's business once the G is queued). An M that
//! `startm` hands a P is not simulated (counted in `started`: it holds a
//! P, spinning, and will look at every queue and timer); an M that
//! `stopm`s ends its thread. Loops are bounded (`PASSES`); an M still
//! holding a P at the bound counts as awake. GOMAXPROCS is 2. sysmon is
//! left out: its rescues (a timer 1 ms overdue while nobody polls, a
//! socket not polled for 10 ms, stranded work) are the fallbacks whose
//! need the model is about.
//!
//! Orderings. loom treats SeqCst accesses as AcqRel (only `fence(SeqCst)`
//! is sequentially consistent there), so a StoreLoad pair the real code
//! closes with SeqCst accesses on both sides is written store,
//! `fence(SeqCst)`, load (sema_model.rs explains); where the real code
//! has a `fence(SeqCst)`, so does the model.
//!
//! The property, checked once every M is asleep (in `stopm` or in
//! epoll_wait with nothing to wake it) or done, and every waker done: no
//! work is left (a timer due by the final clock that did not run, a G
//! queued, a ready socket not harvested) while some P is idle and no M is
//! awake (started by `startm`, or still holding a P at the bound). An M
//! blocked in epoll whose deadline the clock reached, or with the eventfd
//! or a socket readable, is awake (it returns). A counterexample panics
//! "lost wake-up" with the event log. To make that check possible without
//! a loom deadlock (whose panic aborts the binary), the main thread waits
//! until no M is active, then sets `done` and wakes the epoll sleeper,
//! which then ends its thread as asleep.
//!
//! The finding (docs/TESTING.md). `timer0_when` is Relaxed (timer.rs:447,
//! :493, :517) where Go's timer0When is sequentially consistent, and
//! `wake_netpoller` (sched.rs:1037-1047) reads `lastpoll` and
//! `poll_until` right after the add with nothing ordering the add's
//! `timer0_when` store before those loads. A poller that wakes at its
//! deadline stores `poll_until` 0 and `lastpoll` (sched.rs:1553-1554) and
//! then reads the other Ps' timers (steal_work, `check_timers_no_p`). So
//! an adder whose loads still see the poll (`lastpoll` 0, `poll_until`
//! the poller's deadline, no later than its timer: no break needed, the
//! poller wakes by then) and a poller that wakes and reads the adder's
//! `timer0_when` as the old value are both allowed (store buffering: the
//! Relaxed store may be ordered after the adder's loads): the poller
//! blocks again, in epoll_wait for ever if a goroutine waits on a socket,
//! and the timer does not run until its P's goroutine yields (sysmon's
//! rescue requires `lastpoll != 0`). The code until session 27's fix
//! (`Bugs::add_fence` false; the `loom_poll_bug_no_add_fence*` tests
//! panic) had this; `FIXED`, the code now, has one `fence(SeqCst)` at the
//! top of `wake_netpoller`.
//! The poller's side needs no change: see `Sched::poll`.
//!
//! Run with `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib
//! find_runnable_model` (docs/TESTING.md, "Models of the wake-up
//! protocols").

use crate::loom_explore::spawn;
use ::loom::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU32, Ordering};
use ::loom::sync::{Arc, Condvar, Mutex};
use ::loom::thread;
use std::fmt::Write as _;

/// find_runnable passes per M thread (a pass ends in a G, `stopm`, or a
/// `continue 'top`: a re-check that took a P, a poll that took one back).
/// Never reached in the fixed models (checked by making it panic; 4 was
/// reached in `three_resets`, whose three breaks may each send the poller
/// round again).
const PASSES: usize = 6;

const IDLE: i32 = 0;
const RUNNING: i32 = 1;

/// The protocol as the code has it (`FIXED`), or with a plausible bug put
/// in.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bugs {
    /// Session 27's fix: `fence(SeqCst)` at the top of `wake_netpoller`,
    /// between the add's Relaxed `timer0_when` store (timer.rs
    /// `add_purging`) and the `lastpoll`/`poll_until` loads. False: the
    /// code before the fix.
    add_fence: bool,
    /// `wake_netpoller` breaks only a poller blocked for ever
    /// (`poll_until == 0`), not one whose deadline is later than the new
    /// timer (sched.rs:1041 without `|| pu > when`).
    break_only_forever: bool,
    /// The blocking `netpoll` clears `WAKE_SIG` before reading the eventfd
    /// (netpoll.rs:162-163 swapped).
    wake_sig_before_read: bool,
    /// A spinning M that gives up its P does not look at the timers again
    /// (sched.rs:1516-1518 removed: Go's "check for timer creation or
    /// expiry concurrently with transitioning from spinning").
    no_timers_after_spinning: bool,
    /// An M that does not poll (another one does) never breaks it, even
    /// when its own timer is earlier (sched.rs:1573-1577 removed).
    no_else_break: bool,
    /// The poller publishes `poll_until` before winning the election
    /// (sched.rs:1534 moved above the `lastpoll` swap of :1533): a loser
    /// overwrites the winner's deadline.
    poll_until_before_swap: bool,
    /// A poller that took a P back with no G goes straight back to the
    /// poll with its old deadline, without `continue 'top` (its timers,
    /// queues and steal_work: sched.rs:1571).
    repoll_without_recheck: bool,
    /// `inject_glist` / `inject_glist_p` start no M for the Gs they put
    /// on the global queue (sched.rs:1702-1705 removed).
    inject_no_startm: bool,
}

const FIXED: Bugs = Bugs {
    add_fence: true,
    break_only_forever: false,
    wake_sig_before_read: false,
    no_timers_after_spinning: false,
    no_else_break: false,
    poll_until_before_swap: false,
    repoll_without_recheck: false,
    inject_no_startm: false,
};

/// The code before session 27's fix: no fence in `wake_netpoller`.
const NO_ADD_FENCE: Bugs = Bugs {
    add_fence: false,
    ..FIXED
};

/// sched.rs `Synced` (under sched.lock).
struct Synced {
    pidle: Vec<usize>,
    /// Global run queue length (Gs are interchangeable here).
    runq: i32,
}

/// A P: status, run queue (a count), timers.
struct P {
    status: AtomicI32,
    runq: AtomicI32,
    /// timer.rs `Timers::heap` (the deadlines; timers only record that
    /// they ran).
    heap: Mutex<Vec<i64>>,
    /// timer.rs `Timers::timer0_when`.
    timer0: AtomicI64,
}

/// The kernel: the epoll instance with its break eventfd and the
/// sockets, under the kernel's locks.
#[derive(Default)]
struct Kernel {
    /// The eventfd's counter (readable while > 0).
    efd: u64,
    /// Sockets ready and not harvested: each readies one G.
    ready: u32,
    /// The deadline of the M blocked in epoll_wait (0: for ever).
    blocked: Option<i64>,
    /// M threads not asleep (in epoll_wait) and not ended.
    active: usize,
    /// Every waker is done and every M asleep or ended.
    done: bool,
    /// Ms that ended asleep in epoll_wait at `done`.
    asleep_in_poll: usize,
}

/// sched.rs `Sched` plus the model's kernel, clock and bookkeeping.
struct Sched {
    lock: Mutex<Synced>,
    nmspinning: AtomicI32,
    npidle: AtomicI32,
    runqsize: AtomicI32,
    lastpoll: AtomicI64,
    poll_until: AtomicI64,
    /// netpoll.rs `WAKE_SIG`.
    wake_sig: AtomicU32,
    /// `netpoll::has_waiters()` (constant per scenario: a goroutine waits
    /// on a socket for the whole scenario, or none does).
    waiters: bool,
    kernel: Mutex<Kernel>,
    kcv: Condvar,
    clock: Mutex<i64>,
    ps: Vec<P>,
    bugs: Bugs,
    /// Bookkeeping (std, so loom does not schedule around it).
    book: std::sync::Mutex<Book>,
}

#[derive(Default)]
struct Book {
    /// Deadlines of the timers added, and of those run.
    added: Vec<i64>,
    fired: Vec<i64>,
    started: usize,
    running: usize,
    took: usize,
    parked: usize,
    log: String,
}

/// An M thread's own state (sched.rs `M`: `p`, `spinning`).
struct M {
    name: &'static str,
    p: Option<usize>,
    spinning: bool,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    /// Runs a G (holding its P).
    Took,
    /// stopm.
    Parked,
    /// Asleep in epoll_wait when everything else was done.
    AsleepInPoll,
    /// Still holding a P at the loop bound.
    Running,
}

/// What a blocking netpoll returned.
enum Polled {
    Gs(u32),
    /// Asleep for good (`done`).
    Asleep,
}

impl Sched {
    /// `running[i]`: P i starts Running (held by an M thread or a
    /// goroutine of the scenario), else idle. `timers`: (P, deadline)
    /// already queued.
    fn new(running: &[bool], waiters: bool, timers: &[(usize, i64)], bugs: Bugs) -> Sched {
        let pidle: Vec<usize> = (0..running.len()).filter(|&i| !running[i]).collect();
        let npidle = pidle.len() as i32;
        let ps: Vec<P> = running
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let mut h: Vec<i64> = timers.iter().filter(|t| t.0 == i).map(|t| t.1).collect();
                h.sort();
                P {
                    status: AtomicI32::new(if r { RUNNING } else { IDLE }),
                    runq: AtomicI32::new(0),
                    timer0: AtomicI64::new(h.first().copied().unwrap_or(0)),
                    heap: Mutex::new(h),
                }
            })
            .collect();
        let book = Book {
            added: timers.iter().map(|t| t.1).collect(),
            ..Book::default()
        };
        Sched {
            lock: Mutex::new(Synced { pidle, runq: 0 }),
            nmspinning: AtomicI32::new(0),
            npidle: AtomicI32::new(npidle),
            runqsize: AtomicI32::new(0),
            lastpoll: AtomicI64::new(1),
            poll_until: AtomicI64::new(0),
            wake_sig: AtomicU32::new(0),
            waiters,
            kernel: Mutex::new(Kernel::default()),
            kcv: Condvar::new(),
            clock: Mutex::new(1),
            ps,
            bugs,
            book: std::sync::Mutex::new(book),
        }
    }

    fn log(&self, who: &str, what: std::fmt::Arguments<'_>) {
        let mut b = self.book.lock().unwrap();
        let _ = writeln!(b.log, "  {who}: {what}");
    }

    // ----- the clock and the kernel ------------------------------------------

    /// os.rs `nanotime`.
    fn nanotime(&self) -> i64 {
        *self.clock.lock().unwrap()
    }

    /// Time passes: the clock reaches `t` (the kernel's timer wakes an
    /// epoll_wait whose deadline passed).
    fn advance(&self, t: i64) {
        *self.clock.lock().unwrap() = t;
        self.log("clock", format_args!("now {t}"));
        let _k = self.kernel.lock().unwrap();
        self.kcv.notify_all();
    }

    /// `n` sockets become readable (one edge each; one G waits on each).
    fn sockets_ready(&self, n: u32) {
        self.kernel.lock().unwrap().ready += n;
        self.log("kernel", format_args!("{n} socket(s) ready"));
        self.kcv.notify_all();
    }

    /// netpoll.rs `netpoll` (:144-195): `deadline` None is the
    /// non-blocking poll (delay 0), Some(0) blocks for ever, Some(d) until
    /// the clock reaches d. Returns the Gs readied.
    fn netpoll(&self, who: &str, deadline: Option<i64>) -> Polled {
        let mut k = self.kernel.lock().unwrap();
        if let Some(d) = deadline {
            // epoll_wait (netpoll.rs:150).
            loop {
                let timed_out = d != 0 && *self.clock.lock().unwrap() >= d;
                if k.efd > 0 || k.ready > 0 || timed_out {
                    break;
                }
                if k.done {
                    k.asleep_in_poll += 1;
                    drop(k);
                    self.log(
                        who,
                        format_args!("asleep in epoll_wait (deadline {d}) at the end"),
                    );
                    return Polled::Asleep;
                }
                if k.blocked.is_none() {
                    k.blocked = Some(d);
                    k.active -= 1;
                    self.kcv.notify_all();
                }
                k = self.kcv.wait(k).unwrap();
            }
            if k.blocked.take().is_some() {
                k.active += 1;
            }
        }
        let brk = k.efd > 0;
        let gs = core::mem::take(&mut k.ready);
        drop(k);
        self.log(
            who,
            format_args!("netpoll({deadline:?}): break {brk}, {gs} G(s)"),
        );
        // :153-166: only a blocking poll drains the break.
        if brk && deadline.is_some() {
            if self.bugs.wake_sig_before_read {
                self.wake_sig.store(0, Ordering::Release);
                self.kernel.lock().unwrap().efd = 0;
            } else {
                // read(2) of the eventfd (:162), then :163 Release.
                self.kernel.lock().unwrap().efd = 0;
                self.wake_sig.store(0, Ordering::Release);
            }
        }
        Polled::Gs(gs)
    }

    /// netpoll.rs `netpoll_break` (:127-139).
    fn netpoll_break(&self, who: &str) {
        // :129 AcqRel CAS 0 -> 1: only the first breaker writes.
        if self
            .wake_sig
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            self.log(who, format_args!("netpoll_break: WAKE_SIG already 1"));
            return;
        }
        // :138 write(2) of the eventfd.
        self.kernel.lock().unwrap().efd += 1;
        self.kcv.notify_all();
        self.log(who, format_args!("netpoll_break: eventfd written"));
    }

    // ----- timers (timer.rs) ---------------------------------------------------

    /// timer.rs `Timers::next_when` (:446-448, Relaxed).
    fn next_when(&self, p: usize) -> i64 {
        self.ps[p].timer0.load(Ordering::Relaxed)
    }

    /// timer.rs `Timers::add_purging` (:460-499): returns whether the new
    /// timer is the earliest.
    fn timers_add(&self, p: usize, when: i64) -> bool {
        let mut h = self.ps[p].heap.lock().unwrap();
        h.push(when);
        h.sort();
        let first = h[0] == when;
        // :493 Relaxed, under the heap lock.
        self.ps[p].timer0.store(h[0], Ordering::Relaxed);
        first
    }

    /// time.rs `add_timer` (:35-53) from a goroutine running on P `p`.
    fn add_timer(&self, who: &str, p: usize, when: i64) {
        self.book.lock().unwrap().added.push(when);
        let first = self.timers_add(p, when);
        self.log(
            who,
            format_args!("add_timer({when}) on P{p}: first {first}"),
        );
        if first {
            self.wake_netpoller(who, when);
        }
    }

    /// timer.rs `Timers::check` (:533-574): runs the due timers of P `p`;
    /// `now` 0 reads the clock. Returns (now, next deadline or 0, ran).
    fn check_timers(&self, who: &str, p: usize, mut now: i64) -> (i64, i64, bool) {
        let next = self.next_when(p);
        if next == 0 {
            return (now, 0, false);
        }
        if now == 0 {
            now = self.nanotime();
        }
        if now < next {
            return (now, next, false);
        }
        let mut h = self.ps[p].heap.lock().unwrap();
        let due: Vec<i64> = h.iter().copied().filter(|&w| w <= now).collect();
        h.retain(|&w| w > now);
        // pop_due (:517) Relaxed.
        self.ps[p]
            .timer0
            .store(h.first().copied().unwrap_or(0), Ordering::Relaxed);
        drop(h);
        let ran = !due.is_empty();
        if ran {
            self.log(who, format_args!("ran timer(s) {due:?} of P{p}"));
            self.book.lock().unwrap().fired.extend(due);
        }
        (now, self.next_when(p), ran)
    }

    /// sched.rs `wake_netpoller` (:1037-1047).
    fn wake_netpoller(&self, who: &str, when: i64) {
        if self.bugs.add_fence {
            // The proposed fix: the add's timer0_when store before the
            // loads below (Go: SeqCst store, SeqCst loads).
            fence(Ordering::SeqCst);
        }
        if self.lastpoll.load(Ordering::SeqCst) == 0 {
            let pu = self.poll_until.load(Ordering::SeqCst);
            let brk = pu == 0 || (!self.bugs.break_only_forever && pu > when);
            self.log(
                who,
                format_args!("wake_netpoller({when}): lastpoll 0, poll_until {pu}: break {brk}"),
            );
            if brk {
                self.netpoll_break(who);
            }
        } else {
            self.log(
                who,
                format_args!("wake_netpoller({when}): lastpoll != 0: wakep"),
            );
            self.wakep(who);
        }
    }

    // ----- run queues and the idle list (as spinning_model.rs) -----------------

    fn runq_take(&self, p: usize) -> bool {
        let q = &self.ps[p].runq;
        let mut n = q.load(Ordering::Acquire);
        while n > 0 {
            match q.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(v) => n = v,
            }
        }
        false
    }

    fn idle(&self, p: usize) -> bool {
        self.ps[p].status.load(Ordering::Acquire) == IDLE
    }

    fn pidleput(&self, s: &mut Synced, p: usize) {
        self.ps[p].status.store(IDLE, Ordering::Release);
        s.pidle.push(p);
        self.npidle.fetch_add(1, Ordering::SeqCst);
    }

    fn pidleget(&self, s: &mut Synced) -> Option<usize> {
        let p = s.pidle.pop()?;
        self.npidle.fetch_sub(1, Ordering::SeqCst);
        Some(p)
    }

    fn globrunqput(&self, s: &mut Synced) {
        s.runq += 1;
        self.runqsize.store(s.runq, Ordering::Relaxed);
    }

    fn globrunqget(&self, s: &mut Synced) -> bool {
        if s.runq == 0 {
            return false;
        }
        s.runq -= 1;
        self.runqsize.store(s.runq, Ordering::Relaxed);
        true
    }

    fn acquirep(&self, m: &mut M, p: usize) {
        self.ps[p].status.store(RUNNING, Ordering::Release);
        m.p = Some(p);
    }

    // ----- waking Ms (sched.rs) ---------------------------------------------------

    /// sched.rs `wakep` (:682-699).
    fn wakep(&self, who: &str) {
        fence(Ordering::SeqCst);
        if self.npidle.load(Ordering::SeqCst) == 0 {
            self.log(who, format_args!("wakep: npidle 0"));
            return;
        }
        if self.nmspinning.load(Ordering::SeqCst) != 0
            || self
                .nmspinning
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            self.log(who, format_args!("wakep: relies on the spinner"));
            return;
        }
        self.startm(who, true);
    }

    /// sched.rs `startm(null, spinning)` (:721-757).
    fn startm(&self, who: &str, spinning: bool) {
        let mut s = self.lock.lock().unwrap();
        match self.pidleget(&mut s) {
            Some(p) => {
                drop(s);
                self.log(
                    who,
                    format_args!("startm: P{p} to an M (spinning {spinning})"),
                );
                self.book.lock().unwrap().started += 1;
            }
            None => {
                if spinning {
                    self.nmspinning.fetch_sub(1, Ordering::SeqCst);
                }
                drop(s);
                self.log(who, format_args!("startm: no idle P"));
            }
        }
    }

    /// sched.rs `inject_glist` (:1690-1706): `n` Gs readied without a P.
    fn inject_glist(&self, who: &str, n: u32) {
        if n == 0 {
            return;
        }
        {
            let mut s = self.lock.lock().unwrap();
            for _ in 0..n {
                self.globrunqput(&mut s);
            }
        }
        self.log(
            who,
            format_args!("inject_glist: {n} G(s) on the global queue"),
        );
        if self.bugs.inject_no_startm {
            return;
        }
        let idle = self.npidle.load(Ordering::SeqCst) as u32;
        for _ in 0..idle.min(n) {
            self.startm(who, false);
        }
    }

    /// sched.rs `inject_glist_p` (:1672-1686): `n` Gs readied by an M
    /// holding `p`.
    fn inject_glist_p(&self, who: &str, p: usize, n: u32) {
        if n == 0 {
            return;
        }
        let idle = (self.npidle.load(Ordering::SeqCst) as u32).min(n);
        self.inject_glist(who, idle);
        for _ in idle..n {
            // runqput (owner): the ring's tail store, Release.
            self.ps[p].runq.fetch_add(1, Ordering::Release);
        }
    }

    /// sched.rs `resetspinning` (:1334-1340).
    fn resetspinning(&self, m: &mut M) {
        m.spinning = false;
        self.nmspinning.fetch_sub(1, Ordering::SeqCst);
        self.wakep(m.name);
    }

    fn took(&self, m: &mut M, from: std::fmt::Arguments<'_>) -> Outcome {
        self.log(m.name, format_args!("took a G {from}"));
        self.book.lock().unwrap().took += 1;
        if m.spinning {
            self.resetspinning(m);
        }
        Outcome::Took
    }

    // ----- find_runnable -----------------------------------------------------------

    /// sched.rs `steal_work` (:1595-1635), two Ps, STEAL_TRIES rounds
    /// folded into the last one (the only one that looks at timers).
    /// Returns (took, now, earliest timer seen).
    fn steal_work(&self, m: &mut M, pp: usize, mut now: i64) -> (bool, i64, i64) {
        let mut poll_until = 0;
        for p2 in (0..self.ps.len()).filter(|&p2| p2 != pp) {
            // :1609-1621 the last round runs p2's timers.
            let (tnow, w, _ran) = self.check_timers(m.name, p2, now);
            now = tnow;
            if w != 0 && (poll_until == 0 || w < poll_until) {
                poll_until = w;
            }
            // :1622-1631
            if !self.idle(p2) && self.runq_take(p2) {
                return (true, now, poll_until);
            }
        }
        (false, now, poll_until)
    }

    /// sched.rs `check_runqs_no_p` (:1639-1652).
    fn check_runqs_no_p(&self) -> Option<usize> {
        for p2 in 0..self.ps.len() {
            if !self.idle(p2) && self.ps[p2].runq.load(Ordering::Acquire) != 0 {
                return self.pidleget(&mut self.lock.lock().unwrap());
            }
        }
        if self.runqsize.load(Ordering::SeqCst) != 0 {
            return self.pidleget(&mut self.lock.lock().unwrap());
        }
        None
    }

    /// sched.rs `check_timers_no_p` (:1655-1663).
    fn check_timers_no_p(&self, mut poll_until: i64) -> i64 {
        for p2 in 0..self.ps.len() {
            let w = self.next_when(p2);
            if w != 0 && (poll_until == 0 || w < poll_until) {
                poll_until = w;
            }
        }
        poll_until
    }

    /// The M thread's end (kernel bookkeeping for the quiescence wait).
    fn m_exit(&self, o: Outcome) -> Outcome {
        let mut k = self.kernel.lock().unwrap();
        if o != Outcome::AsleepInPoll {
            k.active -= 1;
        }
        self.kcv.notify_all();
        drop(k);
        let mut b = self.book.lock().unwrap();
        match o {
            Outcome::Parked => b.parked += 1,
            Outcome::Running => b.running += 1,
            _ => {}
        }
        o
    }

    /// sched.rs `find_runnable` (:1406-1581), for an M holding a P.
    fn find_runnable(&self, m: &mut M) -> Outcome {
        let o = self.find_runnable1(m);
        self.m_exit(o)
    }

    fn find_runnable1(&self, m: &mut M) -> Outcome {
        for _pass in 0..PASSES {
            let pp = m.p.expect("find_runnable holds a P at the top");
            // :1414 its own timers.
            let (mut now, mut poll_until, _) = self.check_timers(m.name, pp, 0);
            // :1426 own queue, :1429 global queue.
            if self.runq_take(pp) {
                return self.took(m, format_args!("from its own P{pp}"));
            }
            if self.runqsize.load(Ordering::Relaxed) != 0
                && self.globrunqget(&mut self.lock.lock().unwrap())
            {
                return self.took(m, format_args!("from the global queue"));
            }
            // :1438 the non-blocking poll, if nobody is blocked in one.
            if self.waiters && self.lastpoll.load(Ordering::Relaxed) != 0 {
                if let Polled::Gs(n) = self.netpoll(m.name, None) {
                    if n > 0 {
                        self.inject_glist_p(m.name, pp, n - 1);
                        return self.took(m, format_args!("from netpoll(0)"));
                    }
                }
            }
            // :1451 spin: steal (and other Ps' timers), capped.
            let procs = self.ps.len() as i32;
            if m.spinning
                || 2 * self.nmspinning.load(Ordering::SeqCst)
                    < procs - self.npidle.load(Ordering::SeqCst)
            {
                if !m.spinning {
                    m.spinning = true;
                    self.nmspinning.fetch_add(1, Ordering::SeqCst);
                }
                let (got, tnow, w) = self.steal_work(m, pp, now);
                now = tnow;
                if got {
                    return self.took(m, format_args!("stolen"));
                }
                if w != 0 && (poll_until == 0 || w < poll_until) {
                    poll_until = w;
                }
            }
            // :1473-1488 give up the P.
            {
                let mut s = self.lock.lock().unwrap();
                if self.globrunqget(&mut s) {
                    drop(s);
                    return self.took(m, format_args!("from the global queue (give-up)"));
                }
                m.p = None;
                self.pidleput(&mut s, pp);
            }
            let was_spinning = m.spinning;
            if was_spinning {
                m.spinning = false;
                self.nmspinning.fetch_sub(1, Ordering::SeqCst);
            }
            // :1499 StoreLoad (parking essay).
            fence(Ordering::SeqCst);
            if was_spinning || self.nmspinning.load(Ordering::SeqCst) == 0 {
                if let Some(p2) = self.check_runqs_no_p() {
                    self.acquirep(m, p2);
                    m.spinning = true;
                    self.nmspinning.fetch_add(1, Ordering::SeqCst);
                    self.log(m.name, format_args!("re-check found work: took P{p2}"));
                    continue;
                }
            }
            // :1516-1518
            if was_spinning && !self.bugs.no_timers_after_spinning {
                poll_until = self.check_timers_no_p(poll_until);
            }
            self.log(
                m.name,
                format_args!(
                    "gave up P{pp} (was spinning {was_spinning}), poll_until {poll_until}"
                ),
            );
            let _ = now;
            // :1532-1572 block in netpoll until the next timer, if nobody
            // else does.
            let net = self.waiters;
            if poll_until != 0 || net {
                if self.bugs.poll_until_before_swap {
                    self.poll_until.store(poll_until, Ordering::SeqCst);
                }
                if self.lastpoll.swap(0, Ordering::SeqCst) != 0 {
                    return match self.poll(m, poll_until, was_spinning) {
                        Some(o) => o,
                        None => continue,
                    };
                }
            }
            if poll_until != 0 && !self.bugs.no_else_break {
                // :1573-1577
                let pu = self.poll_until.load(Ordering::SeqCst);
                self.log(
                    m.name,
                    format_args!("not the poller: its poll_until {pu}, ours {poll_until}"),
                );
                if pu == 0 || pu > poll_until {
                    self.netpoll_break(m.name);
                }
            }
            // :1579 stopm (the M thread ends).
            self.log(m.name, format_args!("stopm"));
            return Outcome::Parked;
        }
        Outcome::Running
    }

    /// The elected poller (sched.rs:1534-1571): None is `continue 'top`
    /// (the M holds a P again).
    fn poll(&self, m: &mut M, mut poll_until: i64, was_spinning: bool) -> Option<Outcome> {
        loop {
            // :1534
            if !self.bugs.poll_until_before_swap {
                self.poll_until.store(poll_until, Ordering::SeqCst);
            }
            self.log(m.name, format_args!("polls until {poll_until}"));
            let n = match self.netpoll(m.name, Some(poll_until)) {
                Polled::Gs(n) => n,
                Polled::Asleep => return Some(Outcome::AsleepInPoll),
            };
            // :1553-1554
            self.poll_until.store(0, Ordering::SeqCst);
            // A SeqCst store in the real code, a swap here: loom leaves a
            // plain store and another thread's RMW (a loser's swap(0))
            // unordered, and our own next swap could then read the
            // loser's 0 after our store, which no modification order
            // allows (netpoll_model.rs has the same artefact).
            self.lastpoll.swap(1, Ordering::SeqCst);
            // No fence is needed here against `wake_netpoller`'s (the
            // fix): the woken poller reads other Ps' timers only when it
            // spins (steal_work), and a spinning M that finds nothing
            // passes the give-up fence (sched.rs:1499) before its last
            // look (`check_timers_no_p`): either that look sees the new
            // timer or the adder's loads see our `poll_until` 0 (it
            // breaks). With the fix and nothing here, every scenario
            // passes.
            // :1555
            let p2 = self.pidleget(&mut self.lock.lock().unwrap());
            let Some(p2) = p2 else {
                self.log(m.name, format_args!("woke with {n} G(s), no idle P"));
                self.inject_glist(m.name, n);
                self.log(m.name, format_args!("stopm"));
                return Some(Outcome::Parked);
            };
            self.acquirep(m, p2);
            self.log(m.name, format_args!("woke with {n} G(s), took P{p2}"));
            if n > 0 {
                self.inject_glist_p(m.name, p2, n - 1);
                return Some(self.took(m, format_args!("from the blocking netpoll")));
            }
            if self.bugs.repoll_without_recheck {
                // The bug: put the P back and poll again with the old
                // deadline, if still elected.
                {
                    let mut s = self.lock.lock().unwrap();
                    m.p = None;
                    self.pidleput(&mut s, p2);
                }
                if self.lastpoll.swap(0, Ordering::SeqCst) != 0 {
                    poll_until = poll_until.max(0);
                    continue;
                }
                return Some(Outcome::Parked);
            }
            if was_spinning {
                m.spinning = true;
                self.nmspinning.fetch_add(1, Ordering::SeqCst);
            }
            return None;
        }
    }

    // ----- the end ------------------------------------------------------------------

    /// Waits until no M is active, then sets `done` and wakes the epoll
    /// sleeper (which ends its thread as asleep).
    fn finish(&self) {
        let mut k = self.kernel.lock().unwrap();
        while k.active > 0 {
            k = self.kcv.wait(k).unwrap();
        }
        k.done = true;
        self.kcv.notify_all();
    }

    /// The property, once every thread is done.
    fn check(&self) {
        let now = self.nanotime();
        let s = self.lock.lock().unwrap();
        let k = self.kernel.lock().unwrap();
        let b = self.book.lock().unwrap();
        let mut due: Vec<i64> = b.added.iter().copied().filter(|&w| w <= now).collect();
        for f in &b.fired {
            if let Some(i) = due.iter().position(|w| w == f) {
                due.swap_remove(i);
            }
        }
        let queued: i32 = self
            .ps
            .iter()
            .map(|p| p.runq.load(Ordering::Acquire))
            .sum::<i32>()
            + s.runq;
        let idle = s.pidle.len();
        let awake = b.started + b.running;
        if (!due.is_empty() || queued > 0 || k.ready > 0) && idle > 0 && awake == 0 {
            panic!(
                "lost wake-up: now {now}, timer(s) {due:?} due and not run, {queued} G(s) \
                 queued, {} socket(s) ready; {idle} idle P(s), no M awake ({} parked, {} \
                 asleep in epoll_wait, {} took a G; WAKE_SIG {}, eventfd {}; bugs {:?})\n{}",
                k.ready,
                b.parked,
                k.asleep_in_poll,
                b.took,
                self.wake_sig.load(Ordering::SeqCst),
                k.efd,
                self.bugs,
                b.log
            );
        }
    }
}

/// `bound`: None explores every interleaving; LOOM_MAX_PREEMPTIONS
/// overrides it unless `exact` (the broken variants). Prints the number of
/// interleavings (with `--nocapture`).
fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!("{name}: {n} interleavings (preemption bound {bound:?})");
}

fn m(name: &'static str, p: usize) -> M {
    M {
        name,
        p: Some(p),
        spinning: false,
    }
}

/// Spawns M threads (each from holding its P) and counts them active.
fn spawn_m(s: &Arc<Sched>, name: &'static str, p: usize) -> thread::JoinHandle<Outcome> {
    s.kernel.lock().unwrap().active += 1;
    let s = s.clone();
    thread::spawn(move || s.find_runnable(&mut m(name, p)))
}

// ----- scenarios ------------------------------------------------------------------

/// (1) A goroutine on P0 adds a timer due at 2 and keeps running (its P
/// stays busy) while M1, on P1, finds nothing and becomes the poller
/// (a goroutine waits on a socket: with no timer it polls for ever); then
/// time passes to 2. The timer must run: M1 is woken (break or deadline)
/// or woke a spinner.
fn add_vs_poller(bugs: Bugs, bound: Option<usize>) {
    model("add_vs_poller", bound, bugs != FIXED, move || {
        let s = Arc::new(Sched::new(&[true, true], true, &[], bugs));
        let m1 = spawn_m(&s, "M1", 1);
        let a = spawn(&s, |s| s.add_timer("G0", 0, 2));
        s.advance(2);
        a.join().unwrap();
        s.finish();
        m1.join().unwrap();
        s.check();
    });
}

/// The finding's scenario: as `add_vs_poller`, but P1 has a timer of its
/// own due at 2, so M1 polls until 2, and the goroutine's timer, due at 2
/// too, needs no break (the poller wakes then anyway); after waking the
/// poller must see it.
fn add_vs_poller_deadline(bugs: Bugs, waiters: bool, bound: Option<usize>) {
    model("add_vs_poller_deadline", bound, bugs != FIXED, move || {
        let s = Arc::new(Sched::new(&[true, true], waiters, &[(1, 2)], bugs));
        let m1 = spawn_m(&s, "M1", 1);
        let a = spawn(&s, |s| s.add_timer("G0", 0, 2));
        s.advance(2);
        a.join().unwrap();
        s.finish();
        m1.join().unwrap();
        s.check();
    });
}

/// A goroutine on P0 moves its timer earlier and earlier (reset to 4,
/// then 3, then 2: each add is the earliest, so each calls
/// wake_netpoller) while M1, on P1, polls (for ever, a socket waiter);
/// the clock stops at 2. The breaks race the poller's drain of the
/// eventfd (`WAKE_SIG`).
fn three_resets(bugs: Bugs, bound: Option<usize>) {
    model("three_resets", bound, bugs != FIXED, move || {
        let s = Arc::new(Sched::new(&[true, true], true, &[], bugs));
        let m1 = spawn_m(&s, "M1", 1);
        let a = spawn(&s, |s| {
            for w in [4, 3, 2] {
                s.add_timer("G0", 0, w);
            }
        });
        a.join().unwrap();
        s.advance(2);
        s.finish();
        m1.join().unwrap();
        s.check();
    });
}

/// Two Ms go idle: a goroutine on P0 sleeps (adds a timer due at 2, then
/// its M schedules: find_runnable on P0) while M1, on P1 with a timer of
/// its own due at 3, does too; the clock stops at 2. Whichever polls, it
/// must poll until 2 or be broken by the other.
fn sleep_vs_poller(bugs: Bugs, bound: Option<usize>) {
    model("sleep_vs_poller", bound, bugs != FIXED, move || {
        let s = Arc::new(Sched::new(&[true, true], false, &[(1, 3)], bugs));
        let m1 = spawn_m(&s, "M1", 1);
        s.kernel.lock().unwrap().active += 1;
        let m0 = spawn(&s, |s| {
            s.add_timer("G0", 0, 2);
            s.find_runnable(&mut m("M0", 0))
        });
        s.advance(2);
        s.finish();
        m0.join().unwrap();
        m1.join().unwrap();
        s.check();
    });
}

/// (2) Two sockets become ready (one G waits on each) while M1, on P0
/// with P1 idle, polls: whoever harvests them (the non-blocking poll at
/// the top, or the blocking one) runs one and must get the other run on
/// the idle P.
fn ready_vs_poller(bugs: Bugs, bound: Option<usize>) {
    model("ready_vs_poller", bound, bugs != FIXED, move || {
        let s = Arc::new(Sched::new(&[true, false], true, &[], bugs));
        let m1 = spawn_m(&s, "M1", 0);
        s.sockets_ready(2);
        s.finish();
        m1.join().unwrap();
        s.check();
    });
}

// ----- the protocol with the proposed fix: no lost wake-up --------------------------

#[test]
fn loom_poll_add_vs_poller() {
    add_vs_poller(FIXED, Some(3));
}

#[test]
fn loom_poll_add_vs_poller_deadline() {
    add_vs_poller_deadline(FIXED, false, Some(3));
}

#[test]
fn loom_poll_add_vs_poller_deadline_socket() {
    add_vs_poller_deadline(FIXED, true, Some(3));
}

#[test]
fn loom_poll_three_resets() {
    three_resets(FIXED, Some(3));
}

#[test]
fn loom_poll_sleep_vs_poller() {
    sleep_vs_poller(FIXED, Some(2));
}

#[test]
fn loom_poll_ready_vs_poller() {
    ready_vs_poller(FIXED, None);
}

// ----- the code before session 27's fix: the finding ------------------------------

#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_no_add_fence() {
    add_vs_poller_deadline(NO_ADD_FENCE, false, Some(2));
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_no_add_fence_socket() {
    add_vs_poller_deadline(NO_ADD_FENCE, true, Some(2));
}

// ----- broken variants: loom finds the lost wake-up --------------------------------

/// wake_netpoller breaks only a poller blocked for ever.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_break_only_forever() {
    three_resets(
        Bugs {
            break_only_forever: true,
            ..FIXED
        },
        Some(2),
    );
}

/// WAKE_SIG cleared before the eventfd is read.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_wake_sig_before_read() {
    three_resets(
        Bugs {
            wake_sig_before_read: true,
            ..FIXED
        },
        Some(3),
    );
}

/// No check_timers_no_p after spinning.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_no_timers_after_spinning() {
    add_vs_poller(
        Bugs {
            no_timers_after_spinning: true,
            ..FIXED
        },
        Some(2),
    );
}

/// No break by an M that does not poll.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_no_else_break() {
    sleep_vs_poller(
        Bugs {
            no_else_break: true,
            ..FIXED
        },
        Some(2),
    );
}

/// poll_until published before the election.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_poll_until_before_swap() {
    sleep_vs_poller(
        Bugs {
            poll_until_before_swap: true,
            ..FIXED
        },
        Some(2),
    );
}

/// The woken poller polls again without `continue 'top`.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_repoll_without_recheck() {
    add_vs_poller(
        Bugs {
            repoll_without_recheck: true,
            ..FIXED
        },
        Some(2),
    );
}

/// inject_glist starts no M.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_poll_bug_inject_no_startm() {
    ready_vs_poller(
        Bugs {
            inject_no_startm: true,
            ..FIXED
        },
        None,
    );
}
