//! Per-P local run queue: a 256-slot lock-free ring plus the `runnext` slot.
//!
//! Go's runqput/runqget/runqgrab/runqsteal (proc.go). The owner P is the single
//! producer (put) and one of many consumers (get); other Ps steal half of the
//! ring at a time. The queue knows goroutines only as raw handles (`*mut T`),
//! so the stress tests below drive it without any scheduler or assembly.
//!
//! Memory ordering follows Go's: `tail` is written only by the owner and
//! published with a Release store that pairs with the stealers' Acquire
//! loads, so the slots written before it are visible; `head` moves by CAS
//! (AcqRel on success: it both consumes slots read before it and orders those
//! reads before the owner may overwrite the slots). Slot contents are atomics
//! accessed Relaxed: a stealer may read a slot the owner is concurrently
//! overwriting, but then its head CAS fails and the value is discarded (the
//! race Go tolerates with plain loads, made defined here).

use core::ptr;
#[cfg(not(goro_loom))]
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
// The loom models below (`RUSTFLAGS="--cfg goro_loom" cargo test --release
// --lib runq::loom`) run this very code on loom's atomics, which explore
// every interleaving and the weak-memory outcomes of each ordering.
#[cfg(goro_loom)]
use ::loom::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Slots in the local ring (Go: len(p.runq) = 256).
#[cfg(not(goro_loom))]
pub(crate) const LOCAL_CAP: usize = 256;
/// Four slots under loom, so that the models reach wrap-around and the
/// overflow path (runqputslow) in a few steps.
#[cfg(goro_loom)]
pub(crate) const LOCAL_CAP: usize = 4;

/// A P's local run queue. `put`, `get` and the receiving side of `steal_into`
/// are owner-only; `grab` (the victim side of stealing) may run on any thread.
pub(crate) struct Local<T> {
    /// Next slot to consume; advanced by CAS by the owner and stealers
    /// (AcqRel: see the module doc); loaded with Acquire, which pairs
    /// with those CASes.
    head: AtomicU32,
    /// Next slot to fill; written only by the owner (Release, pairs with
    /// the Acquire loads of other threads); the owner's own loads are
    /// Relaxed.
    tail: AtomicU32,
    /// Relaxed: ordered by `tail`'s Release/Acquire and `head`'s CAS
    /// (module doc).
    buf: [AtomicPtr<T>; LOCAL_CAP],
    /// Go's p.runnext: the G readied by the running G, run next and
    /// inheriting its time slice. Any thread may CAS it away (stealing).
    /// Set by `put`'s AcqRel swap (Release publishes the G), taken by
    /// AcqRel CAS or read with Acquire (which pair with it).
    runnext: AtomicPtr<T>,
}

impl<T> Local<T> {
    #[cfg(not(goro_loom))]
    pub(crate) const fn new() -> Self {
        Local {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            buf: [const { AtomicPtr::new(ptr::null_mut()) }; LOCAL_CAP],
            runnext: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// loom's atomics are not const-constructible.
    #[cfg(goro_loom)]
    pub(crate) fn new() -> Self {
        Local {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            buf: core::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            runnext: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Number of goroutines in the ring plus runnext; a racy snapshot that
    /// is never larger than the true count at some instant (Go's runqempty
    /// care is not needed: callers use it for statistics and heuristics).
    pub(crate) fn len(&self) -> usize {
        // Acquire both ends so the difference is from one consistent-enough view.
        let h = self.head.load(Ordering::Acquire);
        let t = self.tail.load(Ordering::Acquire);
        let n = t.wrapping_sub(h) as usize;
        let n = if n > LOCAL_CAP { 0 } else { n };
        // Relaxed: a count; nothing is read through the pointer.
        n + usize::from(!self.runnext.load(Ordering::Relaxed).is_null())
    }

    /// Go's runqempty: true only if the ring and runnext were empty at one
    /// moment (re-reads tail to rule out a concurrent runnext kick).
    pub(crate) fn is_empty(&self) -> bool {
        loop {
            let h = self.head.load(Ordering::Acquire);
            let t = self.tail.load(Ordering::Acquire);
            let next = self.runnext.load(Ordering::Acquire);
            if self.tail.load(Ordering::Acquire) == t {
                return h == t && next.is_null();
            }
        }
    }

    /// Go's runqput. Owner only. With `next`, `gp` goes to runnext and the G
    /// it displaces goes to the ring. If the ring is full, half of it plus
    /// the G are passed, in order, to `overflow` (the caller moves them to
    /// the global queue: Go's runqputslow).
    #[inline]
    pub(crate) fn put(&self, mut gp: *mut T, next: bool, overflow: impl FnOnce(&[*mut T])) {
        if next {
            // AcqRel: Release publishes gp to whoever takes runnext;
            // Acquire takes ownership of the displaced G.
            let old = self.runnext.swap(gp, Ordering::AcqRel);
            if old.is_null() {
                return;
            }
            gp = old;
        }
        loop {
            // Acquire pairs with the stealers' head CAS: their reads of the
            // slots we are about to overwrite happened before.
            let h = self.head.load(Ordering::Acquire);
            let t = self.tail.load(Ordering::Relaxed); // owner's own variable
            if (t.wrapping_sub(h) as usize) < LOCAL_CAP {
                self.buf[t as usize % LOCAL_CAP].store(gp, Ordering::Relaxed);
                // Release: the slot write is visible to whoever sees the new tail.
                self.tail.store(t.wrapping_add(1), Ordering::Release);
                return;
            }
            if let Some((batch, n)) = self.put_slow(gp, h, t) {
                overflow(&batch[..n]);
                return;
            }
            // The queue is no longer full (a stealer took some); retry.
        }
    }

    /// Go's runqputslow: move half the ring plus `gp` out in one batch.
    #[cold]
    #[allow(clippy::type_complexity)]
    fn put_slow(&self, gp: *mut T, h: u32, t: u32) -> Option<([*mut T; LOCAL_CAP / 2 + 1], usize)> {
        let n = (t.wrapping_sub(h) / 2) as usize;
        if n != LOCAL_CAP / 2 {
            crate::throw::throw("runqputslow: queue is not full");
        }
        let mut batch = [ptr::null_mut(); LOCAL_CAP / 2 + 1];
        for (i, b) in batch.iter_mut().take(n).enumerate() {
            *b = self.buf[(h as usize + i) % LOCAL_CAP].load(Ordering::Relaxed);
        }
        // AcqRel: consumes the slots read above (see module doc).
        if self
            .head
            .compare_exchange(
                h,
                h.wrapping_add(n as u32),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return None;
        }
        batch[n] = gp;
        Some((batch, n + 1))
    }

    /// Go's runqget. Owner only. Returns the G and whether it inherits the
    /// current time slice (it came from runnext).
    pub(crate) fn get(&self) -> Option<(*mut T, bool)> {
        // Acquire: we take ownership of the G published by put's Release.
        let next = self.runnext.load(Ordering::Acquire);
        if !next.is_null()
            && self
                .runnext
                .compare_exchange(next, ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return Some((next, true));
        }
        loop {
            let h = self.head.load(Ordering::Acquire);
            let t = self.tail.load(Ordering::Relaxed); // owner's own variable
            if t == h {
                return None;
            }
            let gp = self.buf[h as usize % LOCAL_CAP].load(Ordering::Relaxed);
            if self
                .head
                .compare_exchange(h, h.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some((gp, false));
            }
        }
    }

    /// Go's runqgrab: copy half of this (victim) queue into `dst` starting
    /// at slot `dst_head`, and claim it. Any thread. With `steal_runnext`
    /// and an empty ring, take runnext; `victim_running` makes it first
    /// sleep (Go's usleep(3): 50-90 µs with Linux's timer slack), because a
    /// running G that just readied runnext is usually about to block and
    /// run it itself (Go: "a sync chan send/recv takes ~50ns").
    fn grab(
        &self,
        dst: &Local<T>,
        dst_head: u32,
        steal_runnext: bool,
        victim_running: bool,
    ) -> u32 {
        loop {
            let h = self.head.load(Ordering::Acquire);
            // Acquire pairs with the owner's Release store of tail.
            let t = self.tail.load(Ordering::Acquire);
            let mut n = t.wrapping_sub(h);
            n -= n / 2;
            if n == 0 {
                if steal_runnext {
                    let next = self.runnext.load(Ordering::Acquire);
                    if !next.is_null() {
                        if victim_running {
                            // Go's usleep(3): give the owner, which has just
                            // readied `next` and is usually about to block,
                            // the chance to run it itself rather than have
                            // Gs thrash between Ps. Under Linux's default
                            // 50 µs timer slack the sleep lasts 50-90 µs, and
                            // that length is what works: goro spun for 3 µs
                            // here until session 24 (stopping once the owner
                            // took it), and stole too early. With Go's sleep
                            // (medians of alternating runs, P=2): chansync
                            // 0.57x, select2 0.74x, threadring 0.87x; a
                            // 10-case dispatcher 0.83x its time and less
                            // than half its CPU (0.35 s against 0.78 s, Go
                            // 0.33 s), an unbuffered pipeline 0.66x, a
                            // fan-in 0.72x; spawn and spawn_wait 1.1x, a
                            // cancellation broadcast 1.10x.
                            crate::os::usleep(3);
                        }
                        if self
                            .runnext
                            .compare_exchange(
                                next,
                                ptr::null_mut(),
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            )
                            .is_err()
                        {
                            continue;
                        }
                        dst.buf[dst_head as usize % LOCAL_CAP].store(next, Ordering::Relaxed);
                        return 1;
                    }
                }
                return 0;
            }
            if n as usize > LOCAL_CAP / 2 {
                continue; // read inconsistent h and t
            }
            for i in 0..n {
                let g = self.buf[(h.wrapping_add(i)) as usize % LOCAL_CAP].load(Ordering::Relaxed);
                dst.buf[(dst_head.wrapping_add(i)) as usize % LOCAL_CAP]
                    .store(g, Ordering::Relaxed);
            }
            if self
                .head
                .compare_exchange(h, h.wrapping_add(n), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return n;
            }
        }
    }

    /// Go's runqsteal: steal half of `victim`'s queue into `self` (whose
    /// owner must be the caller) and return one G to run. Owner of `self` only.
    pub(crate) fn steal_from(
        &self,
        victim: &Local<T>,
        steal_runnext: bool,
        victim_running: bool,
    ) -> Option<*mut T> {
        let t = self.tail.load(Ordering::Relaxed); // owner's own variable
        let mut n = victim.grab(self, t, steal_runnext, victim_running);
        if n == 0 {
            return None;
        }
        n -= 1;
        let gp = self.buf[(t.wrapping_add(n)) as usize % LOCAL_CAP].load(Ordering::Relaxed);
        if n == 0 {
            return Some(gp);
        }
        let h = self.head.load(Ordering::Acquire);
        if t.wrapping_sub(h).wrapping_add(n) as usize >= LOCAL_CAP {
            crate::throw::throw("runqsteal: runq overflow");
        }
        // Release: publishes the stolen slots to our own stealers.
        self.tail.store(t.wrapping_add(n), Ordering::Release);
        Some(gp)
    }

    /// Drains everything (runnext first). Owner only, or with the P stopped.
    pub(crate) fn drain(&self, mut f: impl FnMut(*mut T)) {
        while let Some((gp, _)) = self.get() {
            f(gp);
        }
    }
}

/// loom models of the ring: the owner's put/get (and runnext) racing
/// stealers, on this module's own code. Each asserts the queue's one
/// promise: every G put is taken exactly once (by the owner, a stealer, or
/// the overflow batch), never lost, never twice, never a stale slot.
/// Run with `RUSTFLAGS="--cfg goro_loom" cargo test --release --lib
/// runq::loom` (docs/TESTING.md); LOCAL_CAP is 4 there.
#[cfg(all(test, goro_loom))]
mod loom {
    use super::*;
    use ::loom::sync::Arc;
    use ::loom::thread;

    /// G handles are tagged integers, never dereferenced: a G handed out
    /// twice shows up as a duplicate in the sorted result, not as a
    /// double free.
    fn item(i: usize) -> *mut usize {
        (i << 4) as *mut usize
    }

    fn take(g: *mut usize) -> usize {
        assert!(!g.is_null(), "took an empty slot");
        g as usize >> 4
    }

    /// Everything a stealer gets: the G steal returns plus what landed in
    /// its own queue.
    fn steal_all(victim: &Local<usize>, runnext: bool) -> Vec<usize> {
        let mine = Local::<usize>::new();
        let mut got = Vec::new();
        if let Some(g) = mine.steal_from(victim, runnext, false) {
            got.push(take(g));
        }
        while let Some((g, _)) = mine.get() {
            got.push(take(g));
        }
        got
    }

    fn drain_all(q: &Local<usize>, got: &mut Vec<usize>) {
        while let Some((g, _)) = q.get() {
            got.push(take(g));
        }
    }

    /// Owner puts and gets around a stealer (Go's runqput/runqget against
    /// runqsteal): the ring's head CAS, the tail's Release and the slot
    /// reads after it.
    #[test]
    fn loom_put_get_vs_steal() {
        ::loom::model(|| {
            let q = Arc::new(Local::<usize>::new());
            let thief = {
                let q = q.clone();
                thread::spawn(move || steal_all(&q, false))
            };
            let mut got = Vec::new();
            q.put(item(1), false, |_| panic!("overflow"));
            q.put(item(2), false, |_| panic!("overflow"));
            if let Some((g, _)) = q.get() {
                got.push(take(g));
            }
            q.put(item(3), false, |_| panic!("overflow"));
            drain_all(&q, &mut got);
            got.extend(thief.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, [1, 2, 3]);
        });
    }

    /// runnext: the owner's put-to-runnext (displacing the previous one to
    /// the ring) and get, against a stealer that may take runnext.
    #[test]
    fn loom_runnext_vs_steal() {
        ::loom::model(|| {
            let q = Arc::new(Local::<usize>::new());
            let thief = {
                let q = q.clone();
                thread::spawn(move || steal_all(&q, true))
            };
            let mut got = Vec::new();
            q.put(item(1), true, |_| panic!("overflow"));
            q.put(item(2), true, |_| panic!("overflow"));
            if let Some((g, _)) = q.get() {
                got.push(take(g));
            }
            drain_all(&q, &mut got);
            got.extend(thief.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
        });
    }

    /// A full ring overflows half of itself plus the new G to the global
    /// queue (runqputslow) while a stealer takes from the same head.
    #[test]
    fn loom_overflow_vs_steal() {
        ::loom::model(|| {
            let q = Arc::new(Local::<usize>::new());
            for i in 1..=LOCAL_CAP {
                q.put(item(i), false, |_| panic!("overflow before full"));
            }
            let thief = {
                let q = q.clone();
                thread::spawn(move || steal_all(&q, false))
            };
            let mut got = Vec::new();
            q.put(item(LOCAL_CAP + 1), false, |batch| {
                for &g in batch {
                    got.push(take(g));
                }
            });
            drain_all(&q, &mut got);
            got.extend(thief.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, (1..=LOCAL_CAP + 1).collect::<Vec<_>>());
        });
    }

    /// Go's TestSchedLocalQueueEmpty as a model: while the owner puts a
    /// second G and takes one, another thread's is_empty never reports the
    /// queue empty (a spurious "empty" lets a P go idle with work queued,
    /// the reason for Go's runqempty re-read of tail).
    #[test]
    fn loom_is_empty_not_spurious() {
        for (next0, next1) in [(false, false), (false, true), (true, false), (true, true)] {
            ::loom::model(move || {
                let q = Arc::new(Local::<usize>::new());
                q.put(item(1), next0, |_| panic!("overflow"));
                let t = {
                    let q = q.clone();
                    thread::spawn(move || {
                        assert!(
                            !q.is_empty(),
                            "spuriously empty (next0 {next0}, next1 {next1})"
                        )
                    })
                };
                q.put(item(2), next1, |_| panic!("overflow"));
                assert!(q.get().is_some());
                t.join().unwrap();
            });
        }
    }

    /// Two stealers and the owner's get over one ring.
    #[test]
    fn loom_two_stealers() {
        // Three threads: unbounded, the search runs for minutes; three
        // preemptions cover the interleavings of the CAS races here.
        let mut b = ::loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let q = Arc::new(Local::<usize>::new());
            for i in 1..=3 {
                q.put(item(i), false, |_| panic!("overflow"));
            }
            let thieves: Vec<_> = (0..2)
                .map(|_| {
                    let q = q.clone();
                    thread::spawn(move || steal_all(&q, false))
                })
                .collect();
            let mut got = Vec::new();
            drain_all(&q, &mut got);
            for t in thieves {
                got.extend(t.join().unwrap());
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2, 3]);
        });
    }
}

#[cfg(all(test, not(goro_loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    fn item(i: usize) -> *mut usize {
        Box::into_raw(Box::new(i))
    }

    /// Consumes an item made by `item`.
    fn take(g: *mut usize) -> usize {
        // SAFETY: every item comes from `item` and each is consumed once
        // (what the tests check).
        unsafe { *Box::from_raw(g) }
    }

    /// Reads an item without consuming it (leaks it: tests only).
    fn peek(g: *mut usize) -> usize {
        // SAFETY: items are live until taken; peeked ones are never taken.
        unsafe { *g }
    }

    #[test]
    fn put_get_fifo_and_runnext() {
        let q: Local<usize> = Local::new();
        for i in 0..10 {
            q.put(item(i), false, |_| panic!("overflow"));
        }
        q.put(item(100), true, |_| panic!("overflow"));
        // runnext first, then FIFO.
        let (g, inherit) = q.get().unwrap();
        assert!(inherit);
        assert_eq!(take(g), 100);
        for i in 0..10 {
            let (g, inherit) = q.get().unwrap();
            assert!(!inherit);
            assert_eq!(take(g), i);
        }
        assert!(q.get().is_none());
        assert!(q.is_empty());
    }

    #[test]
    fn runnext_displaces_to_tail() {
        let q: Local<usize> = Local::new();
        q.put(item(1), true, |_| panic!("overflow"));
        q.put(item(2), true, |_| panic!("overflow"));
        assert_eq!(q.len(), 2);
        assert_eq!(take(q.get().unwrap().0), 2);
        assert_eq!(take(q.get().unwrap().0), 1);
    }

    #[test]
    fn overflow_moves_half_plus_one() {
        let q: Local<usize> = Local::new();
        for i in 0..LOCAL_CAP {
            q.put(item(i), false, |_| panic!("overflow"));
        }
        let mut out = Vec::new();
        q.put(item(999), false, |b| out.extend_from_slice(b));
        assert_eq!(out.len(), LOCAL_CAP / 2 + 1, "full queue accepted a put");
        for (i, &g) in out.iter().take(LOCAL_CAP / 2).enumerate() {
            assert_eq!(peek(g), i);
        }
        assert_eq!(peek(out[LOCAL_CAP / 2]), 999);
        assert_eq!(q.len(), LOCAL_CAP / 2);
    }

    #[test]
    fn steal_takes_half() {
        let victim: Local<usize> = Local::new();
        let thief: Local<usize> = Local::new();
        for i in 0..10 {
            victim.put(item(i), false, |_| panic!("overflow"));
        }
        let g = thief.steal_from(&victim, false, false).unwrap();
        assert_eq!(peek(g), 4); // took 0..5, returns the last
        assert_eq!(thief.len(), 4);
        assert_eq!(victim.len(), 5);
        // runnext is stolen only when asked and the ring is empty.
        let v2: Local<usize> = Local::new();
        v2.put(item(7), true, |_| panic!("overflow"));
        assert!(thief.steal_from(&v2, false, false).is_none());
        assert_eq!(peek(thief.steal_from(&v2, true, false).unwrap()), 7);
    }

    /// Stealing into a non-empty queue (findrunnable steals only when the
    /// local ring is empty, so nothing else runs this path): the stolen Gs
    /// go after the thief's own, which keep their FIFO order, also when the
    /// thief's ring wraps around its end.
    #[test]
    fn steal_into_non_empty_queue() {
        for own in [1usize, 3, LOCAL_CAP / 4] {
            let victim: Local<usize> = Local::new();
            let thief: Local<usize> = Local::new();
            // Move the thief's head near the end of its ring.
            for i in 0..LOCAL_CAP - 2 {
                thief.put(item(i), false, |_| panic!("overflow"));
                assert_eq!(take(thief.get().unwrap().0), i);
            }
            for i in 0..own {
                thief.put(item(1000 + i), false, |_| panic!("overflow"));
            }
            for i in 0..10 {
                victim.put(item(i), false, |_| panic!("overflow"));
            }
            let g = thief.steal_from(&victim, false, false).unwrap();
            assert_eq!(take(g), 4, "own={own}: the last stolen G is returned");
            assert_eq!(thief.len(), own + 4, "own={own}");
            assert_eq!(victim.len(), 5, "own={own}");
            let mut got = Vec::new();
            while let Some((g, _)) = thief.get() {
                got.push(take(g));
            }
            let want: Vec<usize> = (0..own).map(|i| 1000 + i).chain(0..4).collect();
            assert_eq!(got, want, "own={own}: the thief's queue after the steal");
            let mut rest = Vec::new();
            while let Some((g, _)) = victim.get() {
                rest.push(take(g));
            }
            assert_eq!(rest, (5..10).collect::<Vec<_>>());
        }
    }

    /// Deterministic-outcome stress: one owner puts/gets, several thieves
    /// steal concurrently; every item must be consumed exactly once.
    #[test]
    fn stress_put_get_steal_exactly_once() {
        const N: usize = 200_000;
        const THIEVES: usize = 3;
        let victim = Arc::new(Local::<usize>::new());
        let done = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::with_capacity(N)));
        let mut hs = Vec::new();
        for _ in 0..THIEVES {
            let victim = victim.clone();
            let done = done.clone();
            let seen = seen.clone();
            hs.push(std::thread::spawn(move || {
                let mine = Local::<usize>::new();
                let mut local = Vec::new();
                loop {
                    let finished = done.load(Ordering::Acquire);
                    if let Some(g) = mine.steal_from(&victim, true, false) {
                        local.push(take(g));
                        while let Some((g, _)) = mine.get() {
                            local.push(take(g));
                        }
                    } else if finished {
                        break;
                    }
                }
                seen.lock().unwrap().extend(local);
            }));
        }
        let mut overflowed = Vec::new();
        let mut local = Vec::new();
        for i in 0..N {
            victim.put(item(i), i % 7 == 0, |b| {
                for &g in b {
                    overflowed.push(take(g));
                }
            });
            if i % 3 == 0 {
                if let Some((g, _)) = victim.get() {
                    local.push(take(g));
                }
            }
        }
        while let Some((g, _)) = victim.get() {
            local.push(take(g));
        }
        done.store(true, Ordering::Release);
        for h in hs {
            h.join().unwrap();
        }
        let mut all = seen.lock().unwrap().clone();
        all.extend(local);
        all.extend(overflowed);
        assert_eq!(all.len(), N, "items lost or duplicated");
        let set: HashSet<usize> = all.into_iter().collect();
        assert_eq!(set.len(), N, "an item was consumed twice");
    }

    /// Go's TestSchedLocalQueueEmpty (RunSchedLocalQueueEmptyTest): the
    /// owner holds one G, then puts a second and takes one while another
    /// thread asks is_empty at the same moment: it must never say empty.
    /// (The loom model `loom_is_empty_not_spurious` covers every
    /// interleaving; this runs the real atomics on real cores.)
    #[test]
    fn sched_local_queue_empty() {
        let q: Arc<Local<usize>> = Arc::new(Local::new());
        let iters = if std::env::var_os("GORO_QEMU").is_some() {
            500
        } else {
            5_000
        };
        let ready = Arc::new(std::sync::atomic::AtomicU32::new(0));
        for i in 0..iters {
            // SeqCst here and below: a test's start barrier, not under test.
            ready.store(0, Ordering::SeqCst);
            let (next0, next1) = (i & 1 == 0, i & 2 == 0);
            q.put(item(0), next0, |_| panic!("overflow"));
            let t = {
                let (q, ready) = (q.clone(), ready.clone());
                std::thread::spawn(move || {
                    // SeqCst: the start barrier.
                    ready.fetch_add(1, Ordering::SeqCst);
                    while ready.load(Ordering::SeqCst) != 2 {
                        std::hint::spin_loop();
                    }
                    assert!(!q.is_empty(), "queue is empty (next {next0} {next1})");
                })
            };
            // SeqCst: the start barrier.
            ready.fetch_add(1, Ordering::SeqCst);
            while ready.load(Ordering::SeqCst) != 2 {
                std::hint::spin_loop();
            }
            q.put(item(1), next1, |_| panic!("overflow"));
            take(q.get().unwrap().0);
            t.join().unwrap();
            take(q.get().unwrap().0);
        }
    }
}
