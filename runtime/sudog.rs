//! Sudogs and wait queues: a waiter (goroutine or OS thread) queued on a
//! channel. Go's sudog and waitq (runtime2.go, chan.go).
//!
//! A sudog lives on its waiter's stack for exactly one wait. Whoever
//! dequeues it owns it until it readies the waiter; for a select (or timed
//! wait), dequeuing also requires winning the waiter's generation CAS, so
//! exactly one channel (or the timer) completes the wait.

use crate::chan::Hchan;
use crate::g::G;
use crate::park::{self, Parker};
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

/// One waiter on one channel.
pub(crate) struct Sudog {
    /// The waiting goroutine, or null for a plain thread.
    pub(crate) g: *mut G,
    /// The waiting thread's parker when `g` is null.
    pub(crate) parker: *const Parker,
    /// Select/timed wait: the waiter's generation word and this wait's
    /// generation (see `G::selgen`); null for a plain wait.
    pub(crate) sel: *const AtomicU64,
    pub(crate) seq: u64,
    /// Element slot on the waiter's stack (value to send / storage to receive).
    pub(crate) elem: *mut u8,
    /// Whether the operation completed (false: woken by close).
    pub(crate) success: bool,
    next: *mut Sudog,
    prev: *mut Sudog,
    queued: bool,
}

impl Sudog {
    /// A sudog for the caller: its G if it may park (`parkable_g`), else
    /// `parker` (plain threads, and goroutines inside `blocking`).
    pub(crate) fn new_current(parker: &mut Parker, elem: *mut u8) -> Sudog {
        Sudog {
            g: park::parkable_g(),
            parker,
            sel: ptr::null(),
            seq: 0,
            elem,
            success: false,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            queued: false,
        }
    }

    /// Readies the waiter of a dequeued sudog, passing the sudog as the
    /// wake parameter (Go: gp.param = sg; goready(gp)).
    ///
    /// # Safety
    /// `sg` was dequeued by the caller and not readied yet.
    pub(crate) unsafe fn ready(sg: *mut Sudog) {
        // SAFETY: the caller owns sg; its waiter is parked.
        unsafe {
            let g = (*sg).g;
            if !g.is_null() {
                // Relaxed: goready's status CAS (Release) publishes it.
                (*g).param.store(sg as usize, Ordering::Relaxed);
                park::goready(g);
            } else {
                (*(*sg).parker).unpark(sg as usize);
            }
        }
    }

    /// Parks the waiter after queueing, releasing `c`'s lock once it is
    /// safely parked. Returns when readied.
    ///
    /// # Safety
    /// The caller holds `c.lock` and `self` is queued on `c`.
    pub(crate) unsafe fn park_unlock(&mut self, c: &Hchan, reason: crate::waitreason::WaitReason) {
        if !self.g.is_null() {
            park::gopark(Some(unlock_chan), c as *const Hchan as *mut u8, reason);
        } else {
            // SAFETY: we hold the lock (caller's contract).
            unsafe { c.unlock() };
            // SAFETY: parker points to the caller's live Parker.
            unsafe { (*self.parker).park() };
        }
    }
}

/// gopark unlock function: release the channel lock (on g0, same M).
fn unlock_chan(_gp: *mut G, c: *mut u8) -> bool {
    // SAFETY: the parking G held this lock; g0 runs on the same thread.
    unsafe { (*(c as *const Hchan)).unlock() };
    true
}

/// A FIFO of sudogs (Go's waitq). Protected by its channel's lock.
pub(crate) struct WaitQ {
    first: *mut Sudog,
    last: *mut Sudog,
}

impl WaitQ {
    pub(crate) const fn new() -> WaitQ {
        WaitQ {
            first: ptr::null_mut(),
            last: ptr::null_mut(),
        }
    }

    /// Racy peek for fast paths (Go reads c.recvq.first without the lock).
    pub(crate) fn first_racy(&self) -> *mut Sudog {
        // SAFETY: a plain racy read of a pointer-sized field, only compared
        // with null (a torn read is impossible for aligned words).
        unsafe { ptr::read_volatile(&self.first) }
    }

    pub(crate) fn enqueue(&mut self, sg: *mut Sudog) {
        // SAFETY: sg is a live sudog owned by the (locked) caller.
        unsafe {
            (*sg).next = ptr::null_mut();
            (*sg).prev = self.last;
            (*sg).queued = true;
            if self.last.is_null() {
                self.first = sg;
            } else {
                (*self.last).next = sg;
            }
        }
        self.last = sg;
    }

    fn unlink(&mut self, sg: *mut Sudog) {
        // SAFETY: sg is queued here (caller checked), so its links are valid.
        unsafe {
            let (p, n) = ((*sg).prev, (*sg).next);
            if p.is_null() {
                self.first = n;
            } else {
                (*p).next = n;
            }
            if n.is_null() {
                self.last = p;
            } else {
                (*n).prev = p;
            }
            (*sg).next = ptr::null_mut();
            (*sg).prev = ptr::null_mut();
            (*sg).queued = false;
        }
    }

    /// Go's dequeue: the first waiter that can still be completed. Select
    /// waiters whose wait another channel (or a timeout) already won are
    /// dropped from the queue.
    pub(crate) fn dequeue(&mut self) -> *mut Sudog {
        loop {
            let sg = self.first;
            if sg.is_null() {
                return sg;
            }
            self.unlink(sg);
            // SAFETY: sg was queued, so it is live.
            let (sel, seq) = unsafe { ((*sg).sel, (*sg).seq) };
            if !sel.is_null() {
                // AcqRel: winning orders our completion of this wait before
                // the waiter's pass 3; losing means another waker owns it.
                // SAFETY: sel points at the waiter's generation word, live
                // while any of its sudogs is queued.
                let won = unsafe { &*sel }
                    .compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                if !won {
                    continue;
                }
            }
            return sg;
        }
    }

    /// Go's dequeueSudoG: remove `sg` if it is still queued here.
    pub(crate) fn remove(&mut self, sg: *mut Sudog) {
        // SAFETY: sg is a live sudog of the (locked) caller.
        if unsafe { (*sg).queued } {
            self.unlink(sg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sudog(sel: *const AtomicU64, seq: u64) -> Sudog {
        Sudog {
            g: ptr::null_mut(),
            parker: ptr::null(),
            sel,
            seq,
            elem: ptr::null_mut(),
            success: false,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            queued: false,
        }
    }

    #[test]
    fn waitq_fifo_and_remove() {
        let mut s: Vec<Sudog> = (0..5).map(|_| sudog(ptr::null(), 0)).collect();
        let p: Vec<*mut Sudog> = s.iter_mut().map(|x| x as *mut Sudog).collect();
        let mut q = WaitQ::new();
        assert!(q.dequeue().is_null());
        for &x in &p {
            q.enqueue(x);
        }
        // Remove the first, a middle one and the last; removing twice, or
        // removing a sudog that is not queued, changes nothing.
        q.remove(p[0]);
        q.remove(p[2]);
        q.remove(p[4]);
        q.remove(p[2]);
        assert_eq!(q.first_racy(), p[1]);
        assert_eq!(q.dequeue(), p[1]);
        q.enqueue(p[0]);
        assert_eq!(q.dequeue(), p[3]);
        assert_eq!(q.dequeue(), p[0]);
        assert!(q.dequeue().is_null());
        assert!(q.first_racy().is_null());
        // Emptied, a queue links anew from both ends.
        q.enqueue(p[4]);
        q.remove(p[4]);
        assert!(q.dequeue().is_null());
    }

    #[test]
    fn dequeue_skips_select_waiters_already_won() {
        // Two select waits: one still waiting (generation 2 * 5), one
        // already completed elsewhere (2 * 7 + 1); and a plain waiter.
        let live = AtomicU64::new(2 * 5);
        let done = AtomicU64::new(2 * 7 + 1);
        let mut a = sudog(&done, 7);
        let mut b = sudog(&live, 5);
        let mut c = sudog(ptr::null(), 0);
        let mut q = WaitQ::new();
        q.enqueue(&mut a);
        q.enqueue(&mut b);
        q.enqueue(&mut c);
        // `a` lost: dropped; `b` won: its generation is now odd.
        assert_eq!(q.dequeue(), &mut b as *mut Sudog);
        // Relaxed: single-threaded test.
        assert_eq!(live.load(Ordering::Relaxed), 2 * 5 + 1);
        assert!(!a.queued);
        // A second waker of the same wait would lose (the CAS is the
        // once-only gate): re-queue `b` and see it skipped.
        q.enqueue(&mut b);
        q.remove(&mut c);
        assert!(q.dequeue().is_null());
    }
}
