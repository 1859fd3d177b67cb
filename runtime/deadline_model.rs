//! loom model of the socket deadline carrier (runtime/netpoll.rs
//! `DeadlineTimer`, `PollDesc::arm_deadline`, `PollDesc::deadline_stale`,
//! `deadline_carrier_fired`, `deadline_fired`; runtime/timer.rs `Carrier`,
//! `Timers::check`'s pop-and-run, `requeue`, and the heap purge that asks
//! `Timer::is_stale`). User timers (timer.rs `TimerCore`) use the same
//! `Carrier`; their stop/reset/fire around it are not modelled.
//!
//! One heap entry, the carrier, serves a direction's successive timed
//! waits: a wait queues a new carrier only if none is queued at or before
//! its deadline; a carrier that comes up before the current wait's
//! deadline re-queues itself there; one that finds no wait on retires; the
//! heap purge retires a carrier with no wait on. netpoll_model.rs models
//! one armed timer per timed wait and leaves this protocol out (its
//! comment says so); this is that protocol alone, as a miniature in the
//! style of the other models (sema_model.rs): the real code works on the
//! runtime's timer heaps and parks goroutines, so each step is re-stated
//! on loom atomics and mutexes, in the same order and with the same
//! orderings, and commented with the function it stands for.
//!
//! What is kept: the direction's generation (`rseq`/`wseq`, here `gen`),
//! `DeadlineTimer::carrier` (`Carrier::gen`), its `st` lock over
//! `DeadlineState` (`seq`, `due`, and the `CarrierState`'s `queued` and
//! `last`), one timer heap (a loom `Mutex` over a list of
//! (when, carrier) entries) and three actors:
//! - the waiter: timed waits one after another (`arm_deadline`), each
//!   ended by the G (the bump when `wait` returns), except the last, which
//!   stays on;
//! - a timer runner (`Timers::check` on some P): moves the clock through
//!   its steps, and at each pops the due entries and runs them
//!   (`deadline_carrier_fired`, which may `requeue`);
//! - the purge (`Heap` purge inside `Timers::add`, under the heap lock):
//!   drops the entries `deadline_stale` calls stale, retiring the carrier
//!   of a direction with no wait on (`st` only tried).
//!
//! A woken waiter is not modelled: `deadline_fired` records the firing
//! instead of unblocking the slot (netpoll_model.rs covers the slot).
//!
//! Properties: (1) a firing happens only once the clock has passed the
//! fired wait's deadline, and at most once per wait; (2) no lost deadline:
//! when every actor is done, running the heap at the final clock fires the
//! wait still on if its deadline has passed; (3) no leak: once that wait
//! ends too, draining the heap leaves it empty, the carrier retired and
//! nothing recorded as queued.
//!
//! Run with `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib
//! deadline_model` (docs/TESTING.md, "Models of the wake-up protocols").

use crate::loom_explore::spawn;
use ::loom::sync::atomic::{AtomicU64, Ordering};
use ::loom::sync::{Arc, Mutex};

/// timer.rs `NOT_QUEUED`.
const NOT_QUEUED: i64 = i64::MAX;
/// timer.rs `NO_ENTRY`.
const NO_CARRIER: u64 = u64::MAX;

/// Injected bugs, each a plausible slip in the real code; every one must
/// be caught (the `loom_deadline_bug_*` tests).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Bugs {
    /// `arm_deadline` relies on any queued carrier, even one queued after
    /// the new deadline (`st.queued != NOT_QUEUED` for `st.queued <= d`).
    reuse_later_carrier: bool,
    /// `Carrier::retire` clears the generation but leaves `queued` set
    /// (as the user timer's copy of the protocol did before session 29).
    retire_keeps_queued: bool,
    /// `Carrier::covers` judges by `queued` alone (as the deadline's copy
    /// did: correct there, because its retire reset `queued`).
    covers_ignores_gen: bool,
    /// `deadline_carrier_fired` fires without comparing the wait's
    /// deadline with the clock (no re-queue for a later deadline).
    fire_without_due_check: bool,
    /// `deadline_stale` retires without taking `st` (judging the wait off
    /// by the last `seq` it saw, not the current one).
    stale_without_lock: bool,
}

const FIXED: Bugs = Bugs {
    reuse_later_carrier: false,
    retire_keeps_queued: false,
    covers_ignores_gen: false,
    fire_without_due_check: false,
    stale_without_lock: false,
};

/// netpoll.rs `DeadlineState` with its `CarrierState` inlined.
struct State {
    seq: u64,
    due: i64,
    queued: i64,
    last: u64,
}

/// A heap entry: `Timer { when, action: Action::Deadline { carrier } }`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    when: i64,
    carrier: u64,
}

struct Dl {
    /// The direction's generation (PollDesc `rseq`).
    gen: AtomicU64,
    /// `DeadlineTimer::carrier` (`Carrier::gen`).
    carrier: AtomicU64,
    /// `DeadlineTimer::st`.
    st: Mutex<State>,
    /// The timer heap (timer.rs `Timers::heap`).
    heap: Mutex<Vec<Entry>>,
    /// The last `seq` the purge saw under `st` (only for the
    /// `stale_without_lock` bug, which judges by it).
    seen_seq: AtomicU64,
    bugs: Bugs,
    /// Each wait's deadline, by `seq`, and the firings (seq, now). std
    /// locks: bookkeeping loom does not schedule around.
    dues: std::sync::Mutex<Vec<(u64, i64)>>,
    fired: std::sync::Mutex<Vec<(u64, i64)>>,
    /// Event log printed with a counterexample.
    log: std::sync::Mutex<String>,
}

impl Dl {
    fn new(bugs: Bugs) -> Dl {
        Dl {
            gen: AtomicU64::new(0),
            carrier: AtomicU64::new(NO_CARRIER),
            st: Mutex::new(State {
                seq: 0,
                due: 0,
                queued: NOT_QUEUED,
                last: 0,
            }),
            heap: Mutex::new(Vec::new()),
            seen_seq: AtomicU64::new(0),
            bugs,
            dues: std::sync::Mutex::new(Vec::new()),
            fired: std::sync::Mutex::new(Vec::new()),
            log: std::sync::Mutex::new(String::new()),
        }
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        let _ = writeln!(self.log.lock().unwrap(), "  {what}");
    }

    fn fail(&self, what: std::fmt::Arguments<'_>) -> ! {
        panic!("{what}\nevents:\n{}", self.log.lock().unwrap());
    }

    /// `Carrier::next` (under `st`).
    fn new_carrier(&self, st: &mut State, at: i64) -> u64 {
        st.last += 1;
        // Relaxed: written under `st` (Carrier::gen).
        self.carrier.store(st.last, Ordering::Relaxed);
        st.queued = at;
        st.last
    }

    /// `Carrier::retire` (under `st`).
    fn retire(&self, st: &mut State) {
        // Relaxed: written under `st` (Carrier::gen).
        self.carrier.store(NO_CARRIER, Ordering::Relaxed);
        if !self.bugs.retire_keeps_queued {
            st.queued = NOT_QUEUED;
        }
    }

    /// `time::add_timer` / `timer::requeue`: push under the heap lock.
    fn add(&self, when: i64, carrier: u64) {
        self.heap.lock().unwrap().push(Entry { when, carrier });
    }

    /// `PollDesc::arm_deadline`: the timed wait of generation `gen + 1`
    /// with deadline `d`. Returns the wait's `seq`.
    fn arm(&self, d: i64) -> u64 {
        let mut st = self.st.lock().unwrap();
        // SeqCst: netpoll.rs arm_deadline (a fresh generation, under `st`).
        st.seq = self.gen.fetch_add(1, Ordering::SeqCst) + 1;
        st.due = d;
        let seq = st.seq;
        self.dues.lock().unwrap().push((seq, d));
        // `Carrier::covers`.
        let reuse = (self.bugs.covers_ignores_gen
            || self.carrier.load(Ordering::Relaxed) != NO_CARRIER)
            && if self.bugs.reuse_later_carrier {
                st.queued != NOT_QUEUED
            } else {
                st.queued <= d
            };
        if reuse {
            self.log(format_args!(
                "arm seq {seq} due {d}: carrier queued at {}",
                st.queued
            ));
            return seq;
        }
        let carrier = self.new_carrier(&mut st, d);
        drop(st);
        self.log(format_args!("arm seq {seq} due {d}: new carrier {carrier}"));
        // Added after `st` is released (the add may purge).
        self.add(d, carrier);
        seq
    }

    /// The wait returned (`PollDesc::wait`'s closing bump).
    fn end_wait(&self, seq: u64) {
        // SeqCst: the bump in `wait` (netpoll.rs essay: deadlines).
        self.gen.fetch_add(1, Ordering::SeqCst);
        self.log(format_args!("wait seq {seq} ends"));
    }

    /// `PollDesc::deadline_stale`, under the heap lock.
    fn stale(&self, carrier: u64) -> bool {
        // Relaxed: see DeadlineTimer::carrier.
        if self.carrier.load(Ordering::Relaxed) != carrier {
            return true;
        }
        if self.bugs.stale_without_lock {
            // Judges by the `seq` it saw last time it looked (the slip).
            let seen = self.seen_seq.load(Ordering::Relaxed);
            if self.gen.load(Ordering::SeqCst) != seen {
                let mut st = self.st.lock().unwrap();
                self.retire(&mut st);
                self.log(format_args!(
                    "purge retires carrier {carrier} (unlocked check)"
                ));
                return true;
            }
        }
        let Ok(mut st) = self.st.try_lock() else {
            return false;
        };
        self.seen_seq.store(st.seq, Ordering::Relaxed);
        // SeqCst: as in deadline_carrier_fired; under `st`.
        if self.carrier.load(Ordering::Relaxed) == carrier
            && self.gen.load(Ordering::SeqCst) != st.seq
        {
            self.retire(&mut st);
            self.log(format_args!("purge retires carrier {carrier}"));
            return true;
        }
        false
    }

    /// One purge pass (`Heap` purge in `Timers::add_purging`).
    fn purge(&self) {
        let mut h = self.heap.lock().unwrap();
        let before = h.len();
        h.retain(|e| !self.stale(e.carrier));
        let n = before - h.len();
        drop(h);
        self.log(format_args!("purge drops {n}"));
    }

    /// `deadline_carrier_fired`: the entry `carrier` came up at `now`.
    fn carrier_fired(&self, carrier: u64, now: i64) {
        let mut st = self.st.lock().unwrap();
        // Relaxed: written under `st`, which we hold.
        if self.carrier.load(Ordering::Relaxed) != carrier {
            self.log(format_args!("carrier {carrier} superseded"));
            return;
        }
        // SeqCst: as deadline_fired's load.
        if self.gen.load(Ordering::SeqCst) != st.seq {
            self.retire(&mut st);
            self.log(format_args!("carrier {carrier} retires (no wait on)"));
            return;
        }
        if st.due > now && !self.bugs.fire_without_due_check {
            // `Carrier::moved`: the same generation, re-queued.
            let due = st.due;
            st.queued = due;
            drop(st);
            self.log(format_args!("carrier {carrier} moves to {due}"));
            self.add(due, carrier);
            return;
        }
        self.retire(&mut st);
        let seq = st.seq;
        drop(st);
        self.deadline_fired(seq, now);
    }

    /// `deadline_fired`: wakes the wait `seq` if it is still on.
    fn deadline_fired(&self, seq: u64, now: i64) {
        // SeqCst: pairs with the bump in `wait`.
        if self.gen.load(Ordering::SeqCst) != seq {
            self.log(format_args!("fire of seq {seq} finds it ended"));
            return;
        }
        self.log(format_args!("fire seq {seq} at {now}"));
        let due = self
            .dues
            .lock()
            .unwrap()
            .iter()
            .find(|&&(s, _)| s == seq)
            .map(|&(_, d)| d)
            .unwrap();
        if due > now {
            self.fail(format_args!(
                "early fire: wait seq {seq} (deadline {due}) fired at {now}"
            ));
        }
        let mut f = self.fired.lock().unwrap();
        if f.iter().any(|&(s, _)| s == seq) {
            drop(f);
            self.fail(format_args!("wait seq {seq} fired twice"));
        }
        f.push((seq, now));
    }

    /// `Timers::check(now)`: pops and runs the due entries, earliest
    /// first (the heap lock is released while an entry runs).
    fn run(&self, now: i64) {
        loop {
            let mut h = self.heap.lock().unwrap();
            let Some(i) = (0..h.len())
                .filter(|&i| h[i].when <= now)
                .min_by_key(|&i| h[i].when)
            else {
                return;
            };
            let e = h.swap_remove(i);
            drop(h);
            self.carrier_fired(e.carrier, now);
        }
    }

    /// Properties (2) and (3), once every actor is done: the wait `seq`
    /// (deadline `due`) is still on; at `now` it must fire if due; after it
    /// ends, a drain leaves nothing behind.
    fn check_end(&self, seq: u64, due: i64, now: i64) {
        self.run(now);
        let fired = self.fired.lock().unwrap().iter().any(|&(s, _)| s == seq);
        if due <= now && !fired {
            self.fail(format_args!(
                "lost deadline: wait seq {seq} (deadline {due}) still on at {now}, not fired"
            ));
        }
        if !fired {
            self.end_wait(seq);
        }
        self.run(NOT_QUEUED - 1);
        let left = self.heap.lock().unwrap().len();
        let st = self.st.lock().unwrap();
        let carrier = self.carrier.load(Ordering::Relaxed);
        // A `queued` left set is harmless alone (`covers` also checks the
        // generation); the bug that leaves it is checked for what it
        // breaks together with another (`loom_deadline_bug_mixed_copies`).
        let queued_left = st.queued != NOT_QUEUED && !self.bugs.retire_keeps_queued;
        if left != 0 || carrier != NO_CARRIER || queued_left {
            let q = st.queued;
            drop(st);
            self.fail(format_args!(
                "leak: {left} entries left, carrier {carrier}, queued {q}"
            ));
        }
    }
}

fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!("{name}: {n} interleavings (preemption bound {bound:?})");
}

/// The waiter runs `waits` (deadlines; each ends but the last), the runner
/// moves the clock through `clock`, the purge runs `purges` passes; then
/// the heap runs at the last clock step, and the end is checked.
fn scenario(
    name: &'static str,
    bugs: Bugs,
    bound: Option<usize>,
    waits: &'static [i64],
    clock: &'static [i64],
    purges: usize,
) {
    model(name, bound, bugs != FIXED, move || {
        let d = Arc::new(Dl::new(bugs));
        let w = spawn(&d, move |d| {
            let mut seq = 0;
            for (i, &due) in waits.iter().enumerate() {
                seq = d.arm(due);
                if i + 1 < waits.len() {
                    d.end_wait(seq);
                }
            }
            seq
        });
        let r = spawn(&d, move |d| {
            for &now in clock {
                d.run(now);
            }
        });
        let p = (purges > 0).then(|| {
            spawn(&d, move |d| {
                for _ in 0..purges {
                    d.purge();
                }
            })
        });
        let seq = w.join().unwrap();
        r.join().unwrap();
        if let Some(p) = p {
            p.join().unwrap();
        }
        let now = *clock.last().unwrap();
        d.check_end(seq, *waits.last().unwrap(), now);
    });
}

// ----- the fixed protocol -----------------------------------------------------

/// A later deadline after an earlier one (the usual case: each request's
/// timeout later than the last): the first carrier comes up early, finds
/// the second wait and moves, or finds no wait on and retires.
#[test]
fn loom_deadline_later() {
    scenario("deadline later", FIXED, None, &[1, 2], &[1, 2], 0);
}

/// An earlier deadline after a later one: a second carrier is queued.
#[test]
fn loom_deadline_earlier() {
    scenario("deadline earlier", FIXED, None, &[2, 1], &[1], 0);
}

/// Three waits, the clock passing between them.
#[test]
fn loom_deadline_three_waits() {
    scenario("deadline three waits", FIXED, None, &[1, 3, 2], &[1, 2], 0);
}

/// The purge against waits starting and ending.
#[test]
fn loom_deadline_purge() {
    scenario("deadline purge", FIXED, Some(3), &[1, 2], &[1, 2], 2);
}

/// The purge, with a wait whose deadline the clock does not reach.
#[test]
fn loom_deadline_purge_not_due() {
    scenario("deadline purge not due", FIXED, Some(3), &[1, 3], &[2], 1);
}

// ----- broken variants: loom finds each ---------------------------------------

#[test]
#[should_panic(expected = "lost deadline")]
fn loom_deadline_bug_reuse_later_carrier() {
    scenario(
        "bug reuse_later_carrier",
        Bugs {
            reuse_later_carrier: true,
            ..FIXED
        },
        Some(1),
        &[2, 1],
        &[1],
        0,
    );
}

/// The two copies of the protocol before session 29 mixed: the user
/// timer's retire (`queued` left set) with the deadline's `covers` (no
/// generation check). When the runner retires the first carrier before
/// the second wait arms, that wait rides on the retired carrier.
#[test]
#[should_panic(expected = "lost deadline")]
fn loom_deadline_bug_mixed_copies() {
    scenario(
        "bug mixed copies",
        Bugs {
            retire_keeps_queued: true,
            covers_ignores_gen: true,
            ..FIXED
        },
        Some(1),
        &[1, 1],
        &[1],
        0,
    );
}

#[test]
#[should_panic(expected = "early fire")]
fn loom_deadline_bug_fire_without_due_check() {
    scenario(
        "bug fire_without_due_check",
        Bugs {
            fire_without_due_check: true,
            ..FIXED
        },
        Some(1),
        &[1, 2],
        &[1, 2],
        0,
    );
}

#[test]
#[should_panic(expected = "lost deadline")]
fn loom_deadline_bug_stale_without_lock() {
    scenario(
        "bug stale_without_lock",
        Bugs {
            stale_without_lock: true,
            ..FIXED
        },
        Some(2),
        &[1, 2],
        &[2],
        2,
    );
}
