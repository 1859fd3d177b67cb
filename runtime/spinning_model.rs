//! loom model of the spinning-M protocol (the wake-up protocol between work
//! submitters and Ms giving up their P): runtime/sched.rs's "Worker thread
//! parking/unparking" essay, as a miniature.
//!
//! The real code works on global statics, OS threads, futexes and stack
//! switches, so loom cannot run it; this module re-states it step by step
//! with loom's atomics, in the same order and with the same orderings, each
//! step commented with the real function it stands for. What is kept:
//!
//! - `Synced` under a loom `Mutex` (sched.lock): the idle-P list, the global
//!   run queue, the idle-M count;
//! - `npidle`, `nmspinning` and the `runqsize` mirror as atomics, written as
//!   sched.rs writes them (loom treats SeqCst loads, stores and RMWs as
//!   AcqRel; only `fence(SeqCst)` is sequentially consistent there, which
//!   is what the real code relies on for its StoreLoad orders, so the model
//!   allows more outcomes than Rust's memory model, never fewer);
//! - per P: its status (Idle/Running, Release/Acquire as in p.rs) and its
//!   run queue as a count (put: an RMW with Release, as goready's runnext
//!   swap; take: load Acquire + CAS AcqRel, as the ring's head CAS;
//!   emptiness: a load Acquire, as `Local::is_empty`);
//! - submitters: `runqput` then `wakep` (its StoreLoad fence, the `npidle`
//!   and `nmspinning` checks, the CAS 0 -> 1, `startm`);
//! - M threads running `find_runnable`'s loop: own queue, global queue, the
//!   spin decision, stealing, the give-up path (global queue and pidleput
//!   under the lock, the nmspinning decrement, the StoreLoad fence, the
//!   re-check of every P's queue and the global queue), `stopm`, and
//!   `resetspinning` after finding work.
//!
//! Abstractions: an M that `startm` hands a P to (a parked M woken, or a new
//! one) is not simulated: it is counted in `started` and holds that P,
//! spinning, at the end, so it will look at every queue (what happens after
//! that is this same protocol, which the spinning M threads model). An M
//! that parks (stopm) records it and its thread ends. Loops are bounded
//! (`PASSES`); an M still holding a P at the bound counts as running.
//!
//! The property (`check_no_lost_wakeup`): when every thread is done, no G is
//! left queued while a P is idle and no M is spinning or was started with a
//! P. (A G queued while every P is busy is not lost: its P's owner runs it.)
//!
//! `Bugs` switches in the broken variants; the `#[should_panic]` tests below
//! show loom finding each lost wake-up. Run with `RUSTFLAGS="--cfg
//! goro_loom" cargo test --release --lib spinning_model` (docs/TESTING.md).

use ::loom::sync::atomic::{fence, AtomicI32, Ordering};
use ::loom::sync::{Arc, Mutex};
use ::loom::thread;
use std::fmt::Write as _;

/// find_runnable passes per M thread (a pass ends in a G, a park, or a
/// re-check that found work and took a P back: `continue 'top`). Never
/// reached in the fixed models (checked by making it panic).
const PASSES: usize = 3;

const IDLE: i32 = 0;
const RUNNING: i32 = 1;

/// The StoreLoad fence of wakep (submitter) or of find_runnable's give-up.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fence {
    /// `fence(SeqCst)`: the real code.
    SeqCst,
    /// Weakened: `fence(Release)` orders earlier stores before later
    /// stores, not before later loads.
    Release,
    /// Removed.
    None,
}

/// Which Ms re-check the queues after the give-up fence.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Recheck {
    /// goro: an M that was spinning, or any M that reads nmspinning == 0
    /// after its fence (sched.rs find_runnable).
    Goro,
    /// Go: only an M that was spinning.
    SpinningOnly,
    /// No re-check at all.
    None,
}

/// The protocol as sched.rs has it (`Bugs::FIXED`) or a broken variant.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bugs {
    /// wakep's StoreLoad fence.
    submit_fence: Fence,
    /// find_runnable's give-up StoreLoad fence.
    giveup_fence: Fence,
    /// startm undoes the caller's nmspinning increment after releasing
    /// sched.lock (the phantom-spinner ordering, before the fix).
    undo_after_unlock: bool,
    recheck: Recheck,
    /// Not a bug: a `fence(SeqCst)` before and after every atomic access,
    /// so only sequentially consistent executions remain. A lost wake-up
    /// found so is not an artefact of weak memory (nor of loom treating
    /// SeqCst accesses as AcqRel).
    sc_everywhere: bool,
}

impl Bugs {
    const FIXED: Bugs = Bugs {
        submit_fence: Fence::SeqCst,
        giveup_fence: Fence::SeqCst,
        undo_after_unlock: false,
        recheck: Recheck::Goro,
        sc_everywhere: false,
    };
}

fn store_load_fence(f: Fence) {
    match f {
        Fence::SeqCst => fence(Ordering::SeqCst),
        Fence::Release => fence(Ordering::Release),
        Fence::None => {}
    }
}

/// sched.rs `Synced` (under sched.lock).
struct Synced {
    /// Idle Ps (Go's pidle).
    pidle: Vec<usize>,
    /// Global run queue length (Gs are interchangeable here).
    runq: i32,
    /// Ms asleep in stopm (Go's midle); startm's mget.
    nmidle: i32,
}

/// A loom `AtomicI32` that, with `Bugs::sc_everywhere`, is fenced
/// (SeqCst) on both sides of every access.
struct Atom {
    v: AtomicI32,
    sc: bool,
}

impl Atom {
    fn new(v: i32, sc: bool) -> Atom {
        Atom {
            v: AtomicI32::new(v),
            sc,
        }
    }

    fn fenced<R>(&self, f: impl FnOnce(&AtomicI32) -> R) -> R {
        if self.sc {
            fence(Ordering::SeqCst);
        }
        let r = f(&self.v);
        if self.sc {
            fence(Ordering::SeqCst);
        }
        r
    }

    fn load(&self, o: Ordering) -> i32 {
        self.fenced(|a| a.load(o))
    }

    fn store(&self, v: i32, o: Ordering) {
        self.fenced(|a| a.store(v, o))
    }

    fn fetch_add(&self, v: i32, o: Ordering) -> i32 {
        self.fenced(|a| a.fetch_add(v, o))
    }

    fn fetch_sub(&self, v: i32, o: Ordering) -> i32 {
        self.fenced(|a| a.fetch_sub(v, o))
    }

    fn compare_exchange(&self, old: i32, new: i32, s: Ordering, f: Ordering) -> Result<i32, i32> {
        self.fenced(|a| a.compare_exchange(old, new, s, f))
    }
}

/// A P: status and run queue.
struct P {
    status: Atom,
    runq: Atom,
}

/// sched.rs `Sched`, plus the model's bookkeeping.
struct Sched {
    lock: Mutex<Synced>,
    nmspinning: Atom,
    npidle: Atom,
    runqsize: Atom,
    /// allp (GOMAXPROCS = its length).
    ps: Vec<P>,
    bugs: Bugs,
    /// Bookkeeping, not part of the protocol (std, so loom does not
    /// schedule around it; loom runs one thread at a time, so it never
    /// contends): Ms started with a P by startm, Gs taken, Ms parked,
    /// and an event log printed with a counterexample.
    book: std::sync::Mutex<Book>,
}

#[derive(Default)]
struct Book {
    started: usize,
    taken: usize,
    parked: usize,
    running: usize,
    log: String,
}

/// An M thread's own state (sched.rs `M`: `p`, `spinning`).
struct M {
    name: &'static str,
    p: Option<usize>,
    spinning: bool,
}

/// How an M thread's find_runnable loop ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Found a G (and runs it).
    Took,
    /// stopm: asleep on the idle-M list without a P.
    Parked,
    /// Still holding a P at the loop bound.
    Running,
}

impl Sched {
    /// `running`: which Ps start Running (held by a submitter or an M
    /// thread); the others are on the idle list. `nmspinning`: the M
    /// threads that start spinning.
    fn new(running: &[bool], nmspinning: i32, bugs: Bugs) -> Sched {
        let pidle: Vec<usize> = (0..running.len()).filter(|&i| !running[i]).collect();
        let npidle = pidle.len() as i32;
        let sc = bugs.sc_everywhere;
        Sched {
            lock: Mutex::new(Synced {
                pidle,
                runq: 0,
                nmidle: 0,
            }),
            nmspinning: Atom::new(nmspinning, sc),
            npidle: Atom::new(npidle, sc),
            runqsize: Atom::new(0, sc),
            ps: running
                .iter()
                .map(|&r| P {
                    status: Atom::new(if r { RUNNING } else { IDLE }, sc),
                    runq: Atom::new(0, sc),
                })
                .collect(),
            bugs,
            book: std::sync::Mutex::new(Book::default()),
        }
    }

    fn log(&self, who: &str, what: std::fmt::Arguments<'_>) {
        let mut b = self.book.lock().unwrap();
        let _ = writeln!(b.log, "  {who}: {what}");
    }

    // ----- run queues (runq.rs `Local`, as a count) ----------------------

    /// sched.rs `runqput` (goready: runnext swap, AcqRel; newproc: the
    /// tail store, Release). Owner only.
    fn runqput(&self, who: &str, p: usize) {
        self.ps[p].runq.fetch_add(1, Ordering::Release);
        self.log(who, format_args!("runqput: G on P{p}"));
    }

    /// `Local::get` / `steal_from`: head CAS.
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

    /// `Local::is_empty`.
    fn runq_empty(&self, p: usize) -> bool {
        self.ps[p].runq.load(Ordering::Acquire) == 0
    }

    /// p.rs `status`.
    fn idle(&self, p: usize) -> bool {
        self.ps[p].status.load(Ordering::Acquire) == IDLE
    }

    // ----- sched.lock helpers (sched.rs `Synced`) -------------------------

    /// `Synced::pidleput`.
    fn pidleput(&self, s: &mut Synced, p: usize) {
        self.ps[p].status.store(IDLE, Ordering::Release); // set_status
        s.pidle.push(p);
        self.npidle.fetch_add(1, Ordering::SeqCst); // SeqCst: StoreLoad (parking essay)
    }

    /// `Synced::pidleget`.
    fn pidleget(&self, s: &mut Synced) -> Option<usize> {
        let p = s.pidle.pop()?;
        self.npidle.fetch_sub(1, Ordering::SeqCst);
        Some(p)
    }

    /// `Synced::globrunqput` (the mirror store is Relaxed, under the lock).
    fn globrunqput(&self, s: &mut Synced) {
        s.runq += 1;
        self.runqsize.store(s.runq, Ordering::Relaxed);
    }

    /// `Synced::globrunqget` (one G).
    fn globrunqget(&self, s: &mut Synced) -> bool {
        if s.runq == 0 {
            return false;
        }
        s.runq -= 1;
        self.runqsize.store(s.runq, Ordering::Relaxed);
        true
    }

    /// sched.rs `acquirep` (the status store; the rest is M-local).
    fn acquirep(&self, m: &mut M, p: usize) {
        self.ps[p].status.store(RUNNING, Ordering::Release);
        m.p = Some(p);
    }

    // ----- submitters ------------------------------------------------------

    /// sched.rs `wakep`.
    fn wakep(&self, who: &str) {
        // StoreLoad (parking essay): the submitter's queue store above must
        // be ordered before these loads.
        store_load_fence(self.bugs.submit_fence);
        let npidle = self.npidle.load(Ordering::SeqCst);
        if npidle == 0 {
            self.log(who, format_args!("wakep: npidle 0, nobody woken"));
            return;
        }
        // At most one spinner is woken at a time.
        let nms = self.nmspinning.load(Ordering::SeqCst);
        if nms != 0
            || self
                .nmspinning
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            self.log(
                who,
                format_args!("wakep: npidle {npidle}, nmspinning != 0: relies on the spinner"),
            );
            return;
        }
        self.log(
            who,
            format_args!("wakep: npidle {npidle}, nmspinning 0 -> 1"),
        );
        self.startm_spinning(who);
    }

    /// sched.rs `startm(null, spinning = true)`.
    fn startm_spinning(&self, who: &str) {
        let mut s = self.lock.lock().unwrap();
        match self.pidleget(&mut s) {
            Some(p) => {
                // mget (a parked M) or newm: either way an M now holds p and
                // starts spinning in find_runnable. Not simulated further:
                // p stays off the idle list, so it will look at every queue.
                if s.nmidle > 0 {
                    s.nmidle -= 1;
                }
                drop(s);
                self.log(who, format_args!("startm: P{p} to an M, spinning"));
                self.book.lock().unwrap().started += 1;
            }
            None if self.bugs.undo_after_unlock => {
                // The phantom-spinner ordering (before the fix): the undo
                // after the unlock.
                drop(s);
                self.log(
                    who,
                    format_args!("startm: no idle P; unlocked, then undoes"),
                );
                self.nmspinning.fetch_sub(1, Ordering::SeqCst);
            }
            None => {
                // The real code: undo the caller's increment before
                // unlocking (as Go 1.21's wakep does).
                self.nmspinning.fetch_sub(1, Ordering::SeqCst);
                drop(s);
                self.log(
                    who,
                    format_args!("startm: no idle P, undone under the lock"),
                );
            }
        }
    }

    /// A G readied on P `p`, held by the caller: park.rs `goready` (or
    /// proc.rs newproc): `runqput` then `wakep`.
    fn submit_on(&self, who: &str, p: usize) {
        self.runqput(who, p);
        self.wakep(who);
    }

    /// A thread coming back without a P (syscall.rs exit_syscall's
    /// `pidleget_locked` + `acquirep`, not spinning) that then readies a G:
    /// on the P it got, or else on the global queue
    /// (`globrunqput_and_wake`).
    fn submit_after_taking_idle_p(&self, who: &str) {
        let got = {
            let mut s = self.lock.lock().unwrap();
            self.pidleget(&mut s)
        };
        match got {
            Some(p) => {
                self.ps[p].status.store(RUNNING, Ordering::Release); // acquirep
                self.log(who, format_args!("took idle P{p} (not spinning)"));
                self.submit_on(who, p);
            }
            None => {
                self.globrunqput(&mut self.lock.lock().unwrap());
                self.log(who, format_args!("no idle P: G on the global queue"));
                self.wakep(who);
            }
        }
    }

    // ----- an M looking for work -------------------------------------------

    /// sched.rs `resetspinning` (called by schedule when find_runnable
    /// returns a G to a spinning M).
    fn resetspinning(&self, m: &mut M) {
        m.spinning = false;
        self.nmspinning.fetch_sub(1, Ordering::SeqCst);
        self.wakep(m.name);
    }

    fn took(&self, m: &mut M, from: std::fmt::Arguments<'_>) -> Outcome {
        self.log(m.name, format_args!("took a G {from}"));
        self.book.lock().unwrap().taken += 1;
        if m.spinning {
            self.resetspinning(m);
        }
        Outcome::Took
    }

    /// sched.rs `find_runnable` (through `stopm`), for an M holding a P.
    fn find_runnable(&self, m: &mut M) -> Outcome {
        for _pass in 0..PASSES {
            let pp = m.p.expect("find_runnable holds a P at the top");
            // Local run queue.
            if self.runq_take(pp) {
                return self.took(m, format_args!("from its own P{pp}"));
            }
            // Global queue (racy mirror first, then under the lock).
            if self.runqsize.load(Ordering::Relaxed) != 0 {
                let ok = self.globrunqget(&mut self.lock.lock().unwrap());
                if ok {
                    return self.took(m, format_args!("from the global queue"));
                }
            }
            // Spin: steal, but cap spinners at half the busy Ps.
            let procs = self.ps.len() as i32;
            let spin = m.spinning || {
                let nms = self.nmspinning.load(Ordering::SeqCst);
                let npidle = self.npidle.load(Ordering::SeqCst);
                let spin = 2 * nms < procs - npidle;
                self.log(
                    m.name,
                    format_args!("spin check: nmspinning {nms}, npidle {npidle}: spin {spin}"),
                );
                spin
            };
            if spin {
                if !m.spinning {
                    m.spinning = true;
                    self.nmspinning.fetch_add(1, Ordering::SeqCst);
                }
                // steal_work: every other P that is not idle.
                for p2 in (0..self.ps.len()).filter(|&p2| p2 != pp) {
                    if !self.idle(p2) && self.runq_take(p2) {
                        return self.took(m, format_args!("stolen from P{p2}"));
                    }
                }
                self.log(m.name, format_args!("stole nothing"));
            }

            // Nothing to do: give up the P (under sched.lock: global queue
            // last look, releasep, pidleput).
            {
                let mut s = self.lock.lock().unwrap();
                if self.globrunqget(&mut s) {
                    drop(s);
                    return self.took(m, format_args!("from the global queue (give-up)"));
                }
                m.p = None;
                self.pidleput(&mut s, pp);
            }
            self.log(m.name, format_args!("gave up P{pp}"));
            let was_spinning = m.spinning;
            if was_spinning {
                m.spinning = false;
                self.nmspinning.fetch_sub(1, Ordering::SeqCst);
            }
            // StoreLoad (parking essay): the decrement (and pidleput's npidle
            // increment) before the re-check's loads.
            store_load_fence(self.bugs.giveup_fence);
            let recheck = match self.bugs.recheck {
                Recheck::Goro => {
                    was_spinning || {
                        let nms = self.nmspinning.load(Ordering::SeqCst);
                        self.log(m.name, format_args!("after fence: nmspinning {nms}"));
                        nms == 0
                    }
                }
                Recheck::SpinningOnly => was_spinning,
                Recheck::None => false,
            };
            if recheck {
                if let Some(p2) = self.check_runqs_no_p(m.name) {
                    self.acquirep(m, p2);
                    m.spinning = true;
                    self.nmspinning.fetch_add(1, Ordering::SeqCst);
                    self.log(
                        m.name,
                        format_args!("re-check found work: took P{p2}, spinning"),
                    );
                    continue;
                }
            }
            // stopm: mput under the lock, then sleep (the model's M ends).
            self.lock.lock().unwrap().nmidle += 1;
            self.log(m.name, format_args!("parked (stopm)"));
            self.book.lock().unwrap().parked += 1;
            return Outcome::Parked;
        }
        self.book.lock().unwrap().running += 1;
        Outcome::Running
    }

    /// sched.rs `check_runqs_no_p`.
    fn check_runqs_no_p(&self, who: &str) -> Option<usize> {
        for p2 in 0..self.ps.len() {
            if !self.idle(p2) && !self.runq_empty(p2) {
                return self.pidleget(&mut self.lock.lock().unwrap());
            }
        }
        if self.runqsize.load(Ordering::SeqCst) != 0 {
            return self.pidleget(&mut self.lock.lock().unwrap());
        }
        self.log(who, format_args!("re-check: every queue looks empty"));
        None
    }

    /// The property, once every thread is done.
    fn check_no_lost_wakeup(&self) {
        let s = self.lock.lock().unwrap();
        let queued: i32 = self
            .ps
            .iter()
            .map(|p| p.runq.load(Ordering::Acquire))
            .sum::<i32>()
            + s.runq;
        let idle = s.pidle.len();
        let b = self.book.lock().unwrap();
        if queued > 0 && idle > 0 && b.started == 0 && b.running == 0 {
            panic!(
                "lost wake-up: {queued} G(s) queued, {idle} idle P(s), no M spinning or \
                 started ({} parked, {} G(s) taken; bugs {:?})\n{}",
                b.parked, b.taken, self.bugs, b.log
            );
        }
    }
}

/// Runs `f` under loom with a preemption bound (LOOM_MAX_PREEMPTIONS
/// overrides it).
/// Prints the number of interleavings explored (with `--nocapture`).
/// `bound`: None explores every interleaving. LOOM_MAX_PREEMPTIONS
/// overrides it unless `exact` (the broken variants: they must reach their
/// counterexample, which takes 3 preemptions in `phantom_spinner`).
fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!("{name}: {n} interleavings (preemption bound {bound:?})");
}

fn m(name: &'static str, p: usize, spinning: bool) -> M {
    M {
        name,
        p: Some(p),
        spinning,
    }
}

/// The essay's race: a submitter on P0 readies a G while the M of P1,
/// spinning (nmspinning 1), finds nothing and gives up its P. Either the
/// submitter sees the spinner gone (npidle > 0, nmspinning 0: it starts an
/// M) or the M's re-check sees the G.
fn giveup_vs_submit(bugs: Bugs, spinning: bool) {
    model("giveup_vs_submit", None, bugs != Bugs::FIXED, move || {
        let sched = Arc::new(Sched::new(&[true, true], spinning as i32, bugs));
        let s = {
            let sched = sched.clone();
            thread::spawn(move || sched.submit_on("S", 0))
        };
        let mut m1 = m("M1", 1, spinning);
        sched.find_runnable(&mut m1);
        s.join().unwrap();
        sched.check_no_lost_wakeup();
    });
}

/// The phantom spinner: P0 idle, P1 held by M1 (not spinning). W (sysmon,
/// a timer, another goready) calls wakep and sees the idle P; S, back from
/// a syscall, takes P0 and readies a G on it; W's startm then finds no idle
/// P and undoes its increment, which M1 may have counted as a spinner.
fn phantom_spinner(bugs: Bugs, bound: Option<usize>) {
    model("phantom_spinner", bound, bugs != Bugs::FIXED, move || {
        let sched = Arc::new(Sched::new(&[false, true], 0, bugs));
        let w = {
            let sched = sched.clone();
            thread::spawn(move || sched.wakep("W"))
        };
        let s = {
            let sched = sched.clone();
            thread::spawn(move || sched.submit_after_taking_idle_p("S"))
        };
        let mut m1 = m("M1", 1, false);
        sched.find_runnable(&mut m1);
        w.join().unwrap();
        s.join().unwrap();
        sched.check_no_lost_wakeup();
    });
}

/// Two Ms give up while a submitter readies a G: S on P0, M1 on P1
/// (spinning, nmspinning 1), M2 on P2 (not spinning).
fn two_ms_vs_submit(bugs: Bugs, bound: Option<usize>) {
    model("two_ms_vs_submit", bound, bugs != Bugs::FIXED, move || {
        let sched = Arc::new(Sched::new(&[true, true, true], 1, bugs));
        let s = {
            let sched = sched.clone();
            thread::spawn(move || sched.submit_on("S", 0))
        };
        let m2 = {
            let sched = sched.clone();
            thread::spawn(move || sched.find_runnable(&mut m("M2", 2, false)))
        };
        let mut m1 = m("M1", 1, true);
        sched.find_runnable(&mut m1);
        s.join().unwrap();
        m2.join().unwrap();
        sched.check_no_lost_wakeup();
    });
}

// ----- the real protocol: no lost wake-up ------------------------------------

#[test]
fn loom_spinning_m_gives_up_vs_submitter() {
    giveup_vs_submit(Bugs::FIXED, true);
}

#[test]
fn loom_nonspinning_m_gives_up_vs_submitter() {
    giveup_vs_submit(Bugs::FIXED, false);
}

#[test]
fn loom_phantom_spinner() {
    phantom_spinner(Bugs::FIXED, Some(4));
}

#[test]
fn loom_two_ms_give_up_vs_submitter() {
    two_ms_vs_submit(Bugs::FIXED, Some(3));
}

// ----- broken variants: loom finds the lost wake-up ----------------------------

/// (a) wakep's StoreLoad fence removed.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_submitter_fence_removed() {
    giveup_vs_submit(
        Bugs {
            submit_fence: Fence::None,
            ..Bugs::FIXED
        },
        true,
    );
}

/// (a) wakep's fence weakened to Release.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_submitter_fence_release() {
    giveup_vs_submit(
        Bugs {
            submit_fence: Fence::Release,
            ..Bugs::FIXED
        },
        true,
    );
}

/// (b) find_runnable's give-up fence removed.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_giveup_fence_removed() {
    giveup_vs_submit(
        Bugs {
            giveup_fence: Fence::None,
            ..Bugs::FIXED
        },
        true,
    );
}

// (c) and (d) are not weak-memory bugs: they run with `sc_everywhere`, so
// the counterexample loom prints is a sequentially consistent interleaving,
// its log in execution order.

/// (c) the phantom-spinner ordering (startm undoes after unlocking), with
/// goro's re-check by a non-spinning M in place.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_undo_after_unlock() {
    phantom_spinner(
        Bugs {
            undo_after_unlock: true,
            sc_everywhere: true,
            ..Bugs::FIXED
        },
        Some(3),
    );
}

/// (c) Go's rule (only an M that was spinning re-checks), with the fixed
/// startm ordering.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_spinning_only_recheck() {
    phantom_spinner(
        Bugs {
            recheck: Recheck::SpinningOnly,
            sc_everywhere: true,
            ..Bugs::FIXED
        },
        Some(3),
    );
}

/// (c) both: the code before last session's fix.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_phantom_spinner_before_fix() {
    phantom_spinner(
        Bugs {
            undo_after_unlock: true,
            recheck: Recheck::SpinningOnly,
            sc_everywhere: true,
            ..Bugs::FIXED
        },
        Some(3),
    );
}

/// (d) the re-check after the fence removed.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_bug_recheck_removed() {
    giveup_vs_submit(
        Bugs {
            recheck: Recheck::None,
            sc_everywhere: true,
            ..Bugs::FIXED
        },
        true,
    );
}
