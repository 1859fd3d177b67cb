//! Per-P timers: a 4-ary min-heap per P (Go ≤ 1.22's time.go layout).
//!
//! A timer is an action due at a monotonic time (ns, see `os::nanotime`).
//! Timers are added to the current P's heap (or P 0's from a plain thread)
//! and run by whichever M schedules on that P or steals from it in its last
//! steal round (findRunnable); an M with nothing to do blocks in netpoll until
//! the earliest timer of all Ps (see sched.rs). Timers do not migrate when a
//! P goes idle; they move only when a P is destroyed by set_max_procs.

use crate::chan::Sender;
use crate::g::G;
use core::sync::atomic::{AtomicI64, Ordering};
use parking_lot::Mutex;
use std::time::Instant;

/// What a timer does when it fires. Runs on g0 with a P, or on sysmon.
pub(crate) enum Action {
    /// Ready a goroutine parked in `time::sleep` (Go's goroutineReady).
    Ready(*mut G),
    /// Time out a goroutine's select/timed wait of generation `seq`, if no
    /// channel completed it first (see `G::selgen`).
    SelTimeout { gp: *mut G, seq: u64 },
    /// Send the current time without blocking (Go's sendTime); with
    /// `period > 0` re-arm, dropping ticks a slow reader missed.
    Send { tx: Sender<Instant>, period: i64 },
    /// Call `f(arg, seq)` (Go's timer f/arg/seq), unless `*gen != seq`
    /// by then: the owner bumps `gen` to cancel (netpoll deadlines). `gen`
    /// must live forever (poll descriptors are never freed).
    Call {
        f: fn(usize, u64),
        arg: usize,
        gen: &'static core::sync::atomic::AtomicU64,
        seq: u64,
    },
}

// SAFETY: the G pointer is a handle owned by the timer until it fires.
unsafe impl Send for Action {}

struct Timer {
    when: i64,
    seq: u64,
    action: Action,
}

impl Timer {
    fn key(&self) -> (i64, u64) {
        (self.when, self.seq)
    }
}

struct Heap {
    t: Vec<Timer>,
    seq: u64,
    /// Heap size that triggers the next purge of stale timeouts.
    purge_at: usize,
}

/// Smallest heap worth purging of stale timeouts.
const PURGE_MIN: usize = 1024;

impl Timer {
    /// A select/timed-wait timeout whose wait already completed (its G has
    /// moved to another generation): firing it would do nothing.
    fn is_stale(&self) -> bool {
        match self.action {
            Action::SelTimeout { gp, seq } => {
                // SAFETY: Gs are never freed; a racy read only decides
                // whether to drop a timer whose CAS would fail anyway
                // (generations only grow, so stale stays stale).
                unsafe { (*gp).selgen.load(Ordering::Relaxed) != 2 * seq }
            }
            // Relaxed: as above, a cancelled call stays cancelled.
            Action::Call { gen, seq, .. } => gen.load(Ordering::Relaxed) != seq,
            _ => false,
        }
    }
}

/// A P's timers.
pub(crate) struct Timers {
    heap: Mutex<Heap>,
    /// When the earliest timer fires, 0 if none (Go's p.timer0When). Read
    /// without the lock by any M to decide whether to take it; Relaxed
    /// suffices because a stale value only delays or repeats a check that
    /// is then done under the lock.
    timer0_when: AtomicI64,
}

impl Timers {
    pub(crate) const fn new() -> Timers {
        Timers {
            heap: Mutex::new(Heap {
                t: Vec::new(),
                seq: 0,
                purge_at: PURGE_MIN,
            }),
            timer0_when: AtomicI64::new(0),
        }
    }

    /// Earliest deadline, 0 if none.
    pub(crate) fn next_when(&self) -> i64 {
        self.timer0_when.load(Ordering::Relaxed)
    }

    /// Adds a timer; returns true if it is now the earliest.
    pub(crate) fn add(&self, when: i64, action: Action) -> bool {
        let mut h = self.heap.lock();
        if h.t.len() >= h.purge_at {
            // Timeouts of waits that completed early are never deleted
            // eagerly (no cancellation on the hot path); drop them in bulk
            // whenever the heap has doubled, so it stays within about twice
            // the live timers (amortised O(1) per add).
            h.t.retain(|t| !t.is_stale());
            for i in (0..h.t.len() / 4 + 1).rev() {
                sift_down(&mut h.t, i);
            }
            h.purge_at = (2 * h.t.len()).max(PURGE_MIN);
        }
        h.seq += 1;
        let seq = h.seq;
        h.t.push(Timer { when, seq, action });
        let i = h.t.len() - 1;
        sift_up(&mut h.t, i);
        let first = h.t[0].seq == seq;
        self.timer0_when.store(h.t[0].when, Ordering::Relaxed);
        first
    }

    /// Pops the earliest timer if it is due at `now`.
    fn pop_due(&self, now: i64) -> Option<Timer> {
        let mut h = self.heap.lock();
        if h.t.is_empty() || h.t[0].when > now {
            return None;
        }
        let last = h.t.len() - 1;
        h.t.swap(0, last);
        let t = h.t.pop();
        if !h.t.is_empty() {
            sift_down(&mut h.t, 0);
        }
        let w = h.t.first().map_or(0, |t| t.when);
        self.timer0_when.store(w, Ordering::Relaxed);
        t
    }

    /// Moves every timer of `self` into `to` (Go's moveTimers, for a P
    /// destroyed by procresize).
    pub(crate) fn move_all(&self, to: &Timers) {
        let ts = std::mem::take(&mut self.heap.lock().t);
        self.timer0_when.store(0, Ordering::Relaxed);
        for t in ts {
            to.add(t.when, t.action);
        }
    }

    /// Go's checkTimers: runs all due timers. Returns (now, when the next
    /// timer fires or 0, whether any ran). `now` = 0 means "read the clock".
    pub(crate) fn check(&self, mut now: i64) -> (i64, i64, bool) {
        let next = self.next_when();
        if next == 0 {
            return (now, 0, false);
        }
        if now == 0 {
            now = crate::os::nanotime();
        }
        if now < next {
            return (now, next, false);
        }
        let mut ran = false;
        while let Some(t) = self.pop_due(now) {
            ran = true;
            match t.action {
                Action::Ready(gp) => crate::park::goready(gp),
                Action::SelTimeout { gp, seq } => {
                    // SAFETY: Gs are never freed; the CAS decides ownership.
                    let g = unsafe { &*gp };
                    // AcqRel: winning makes us the G's only waker.
                    if g.selgen
                        .compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        g.param.store(0, Ordering::Relaxed);
                        crate::park::goready(gp);
                    }
                }
                Action::Call { f, arg, gen, seq } => {
                    // Relaxed: f re-checks seq under its own synchronisation.
                    if gen.load(Ordering::Relaxed) == seq {
                        f(arg, seq);
                    }
                }
                Action::Send { tx, period } => {
                    let _ = tx.try_send(Instant::now());
                    if period > 0 && !tx.is_closed() {
                        // Go: when + period*(1 + (now-when)/period).
                        let delta = now - t.when;
                        let when = t
                            .when
                            .saturating_add(period.saturating_mul(1 + delta / period));
                        self.add(when, Action::Send { tx, period });
                    }
                }
            }
        }
        (now, self.next_when(), ran)
    }
}

fn sift_up(t: &mut [Timer], mut i: usize) {
    while i > 0 {
        let p = (i - 1) / 4;
        if t[i].key() >= t[p].key() {
            break;
        }
        t.swap(i, p);
        i = p;
    }
}

fn sift_down(t: &mut [Timer], mut i: usize) {
    let n = t.len();
    loop {
        let c = 4 * i + 1;
        if c >= n {
            break;
        }
        let mut m = c;
        for j in c + 1..(c + 4).min(n) {
            if t[j].key() < t[m].key() {
                m = j;
            }
        }
        if t[m].key() >= t[i].key() {
            break;
        }
        t.swap(i, m);
        i = m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_timeouts_are_purged_and_live_ones_kept() {
        let gp = crate::g::G::alloc(None);
        // SAFETY: a fresh G used only as a generation word here.
        let g = unsafe { &*gp };
        let timers = Timers::new();
        // 10,000 timed waits that completed before their timeout: the G's
        // generation moved past each one.
        for seq in 1..=10_000u64 {
            g.selgen.store(2 * seq + 1, Ordering::Relaxed);
            timers.add(i64::MAX - 1, Action::SelTimeout { gp, seq });
        }
        let live_seq = 10_001u64;
        g.selgen.store(2 * live_seq, Ordering::Relaxed);
        timers.add(1_000, Action::SelTimeout { gp, seq: live_seq });
        let n = timers.heap.lock().t.len();
        assert!(n < 2 * PURGE_MIN, "stale timeouts kept: {n} timers");
        assert_eq!(
            timers.next_when(),
            1_000,
            "the live timeout must survive and stay first"
        );
        // Heap order still holds after purges.
        let mut h = timers.heap.lock();
        for i in 1..h.t.len() {
            assert!(h.t[(i - 1) / 4].key() <= h.t[i].key());
        }
        h.t.clear();
    }

    #[test]
    fn heap_orders_by_when_then_seq() {
        let mut v = Vec::new();
        let whens = [50, 10, 40, 10, 30, 20, 60, 5, 5, 70, 1];
        for (seq, &w) in whens.iter().enumerate() {
            v.push(Timer {
                when: w,
                seq: seq as u64,
                action: Action::Ready(core::ptr::null_mut()),
            });
            let i = v.len() - 1;
            sift_up(&mut v, i);
        }
        let mut out = Vec::new();
        while !v.is_empty() {
            let last = v.len() - 1;
            v.swap(0, last);
            let t = v.pop().unwrap();
            if !v.is_empty() {
                sift_down(&mut v, 0);
            }
            out.push(t.key());
        }
        let mut sorted = out.clone();
        sorted.sort();
        assert_eq!(out, sorted);
    }
}
