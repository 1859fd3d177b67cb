//! loom models of the semaphore's lost-wake-up protocol and its handoff
//! (runtime/sema.rs: `semacquire`/`semacquire_slow`, `semrelease`/
//! `semrelease_slow`, `cansemacquire`, the root's `nwait`), and of the
//! notify list behind `Cond` (sema.rs `NotifyList`: tickets, `wait`,
//! `notify_one`, `notify_all`; sync/cond.rs `Cond::wait` taking its ticket
//! under the user's mutex), at the end of the file.
//!
//! A miniature, as for the spinning-M model (spinning_model.rs): the real
//! code parks goroutines with gopark on g0 and keys roots by address in a
//! treap; here one root's waiters are a FIFO under a loom `Mutex`, and a
//! waiter is a loom thread that sleeps on a condition variable until its
//! waker sets `woken` (goready's status CAS / the Parker's flag; loom's
//! `thread::park` is not used because its `unpark` also wakes a thread
//! blocked on a loom mutex, which loom then rejects). Each step is
//! commented with the real one ((1)-(4), (a)-(b): sema.rs's "The lost
//! wake-up race").
//!
//! Orderings: the real code makes every `nwait` and count access SeqCst, and
//! relies on that for the two store-then-load pairs ((2) then (3), (a) then
//! (b)): either the acquirer's retry sees the release or the releaser sees
//! `nwait > 0`. loom treats SeqCst accesses as AcqRel (it does not model the
//! single total order of SeqCst accesses; only `fence(SeqCst)` is), so the
//! model writes each of those pairs as store, `fence(SeqCst)`, load, which
//! is what SeqCst on both sides of such a pair guarantees (store buffering
//! forbidden). `Bugs::no_storeload` drops those fences: the real code with
//! AcqRel in place of SeqCst.
//!
//! The property: every acquire returns, and the count ends at releases -
//! acquires (a handoff neither loses the unit nor hands it twice). A waiter
//! left parked with no one to wake it is a lost release; rather than let
//! loom find a deadlock (its deadlock panic aborts the test binary), the
//! releasing thread, once done, sets `done` and wakes every sleeper: one
//! still waiting (queued, never woken, or woken and queued again) gives up
//! and the model panics with "lost release".

use ::loom::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use ::loom::sync::{Arc, Condvar, Mutex};
use ::loom::thread;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Bugs {
    /// The StoreLoad pairs weakened to AcqRel (no fence between).
    no_storeload: bool,
    /// Step (3), the acquirer's retry after announcing itself, removed.
    no_retry: bool,
    /// Step (b) before (a): the releaser reads nwait before adding to the
    /// count.
    nwait_before_count: bool,
    /// The releaser writes `granted` after waking the waiter.
    granted_after_wake: bool,
}

const FIXED: Bugs = Bugs {
    no_storeload: false,
    no_retry: false,
    nwait_before_count: false,
    granted_after_wake: false,
};

/// A queued waiter (sema.rs `SemaWaiter`: the fields the protocol uses).
struct Waiter {
    /// Set by the handoff release before waking (sema.rs `granted`).
    granted: AtomicBool,
    /// goready / Parker::unpark: Release by the waker, Acquire by the
    /// waiter (goready's status CAS orders `granted` before it).
    woken: AtomicBool,
}

/// One semaphore word and its root.
struct Sema {
    count: AtomicU32,
    /// sema.rs `SemaRoot::nwait`.
    nwait: AtomicU32,
    /// sema.rs `SemaRoot::lock` and the waiters on this address.
    root: Mutex<VecDeque<Arc<Waiter>>>,
    bugs: Bugs,
    /// Where waiters sleep (the Parker / gopark): `woken` and `done` are
    /// set under `park` and announced on `cv`.
    park: Mutex<()>,
    cv: Condvar,
    /// Model only: every release is done (see the module comment).
    done: AtomicBool,
}

impl Sema {
    fn new(count: u32, bugs: Bugs) -> Sema {
        Sema {
            count: AtomicU32::new(count),
            nwait: AtomicU32::new(0),
            root: Mutex::new(VecDeque::new()),
            bugs,
            park: Mutex::new(()),
            cv: Condvar::new(),
            done: AtomicBool::new(false),
        }
    }

    /// The StoreLoad order SeqCst accesses give (see the module comment).
    fn storeload(&self) {
        if !self.bugs.no_storeload {
            fence(Ordering::SeqCst);
        }
    }

    /// sema.rs `cansemacquire`.
    fn cansemacquire(&self) -> bool {
        let mut v = self.count.load(Ordering::SeqCst);
        loop {
            if v == 0 {
                return false;
            }
            match self
                .count
                .compare_exchange(v, v - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(cur) => v = cur,
            }
        }
    }

    /// sema.rs `semacquire` + `semacquire_slow`. Returns whether the unit
    /// was handed off (granted); panics if the acquirer is still parked when
    /// every release is done.
    fn acquire(&self) -> bool {
        if self.cansemacquire() {
            return false;
        }
        loop {
            let w = Arc::new(Waiter {
                granted: AtomicBool::new(false),
                woken: AtomicBool::new(false),
            });
            // (1) root lock.
            let mut q = self.root.lock().unwrap();
            // (2) announce a waiter.
            self.nwait.fetch_add(1, Ordering::SeqCst);
            self.storeload();
            // (3) retry.
            if !self.bugs.no_retry && self.cansemacquire() {
                self.nwait.fetch_sub(1, Ordering::SeqCst);
                return false;
            }
            // (4) queue and park, unlocking once parked (gopark's unlock
            // function): the waker can only find us under the lock.
            q.push_back(w.clone());
            drop(q);
            let mut p = self.park.lock().unwrap();
            while !w.woken.load(Ordering::Acquire) {
                if self.done.load(Ordering::SeqCst) {
                    panic!(
                        "lost release: an acquirer still parked after every release ({:?})",
                        self.bugs
                    );
                }
                p = self.cv.wait(p).unwrap();
            }
            drop(p);
            if w.granted.load(Ordering::Relaxed) || self.cansemacquire() {
                return w.granted.load(Ordering::Relaxed);
            }
            // Woken without the unit (a barging acquirer took it): wait
            // again.
            REWAITS.with(|r| r.set(r.get() + 1));
        }
    }

    /// sema.rs `semrelease` + `semrelease_slow`.
    fn release(&self, handoff: bool) {
        if self.bugs.nwait_before_count {
            let n = self.nwait.load(Ordering::SeqCst);
            self.count.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                return;
            }
        } else {
            // (a)
            self.count.fetch_add(1, Ordering::SeqCst);
            self.storeload();
            // (b) no waiters: done.
            if self.nwait.load(Ordering::SeqCst) == 0 {
                return;
            }
        }
        let w = {
            let mut q = self.root.lock().unwrap();
            // Re-check under the lock.
            if self.nwait.load(Ordering::SeqCst) == 0 {
                return;
            }
            let w = q.pop_front();
            if w.is_some() {
                self.nwait.fetch_sub(1, Ordering::SeqCst);
            }
            w
        };
        let Some(w) = w else { return };
        // Handoff: take the unit on the waiter's behalf, outside the lock.
        let granted = handoff && self.cansemacquire();
        if !self.bugs.granted_after_wake {
            w.granted.store(granted, Ordering::Relaxed);
        }
        // wake: goready / Parker::unpark.
        {
            let _p = self.park.lock().unwrap();
            w.woken.store(true, Ordering::Release);
            self.cv.notify_all();
        }
        if self.bugs.granted_after_wake {
            w.granted.store(granted, Ordering::Relaxed);
        }
    }
}

impl Sema {
    /// Every release is done: wake the sleepers so one still waiting
    /// reports the lost release instead of blocking for ever.
    fn finish(&self) {
        let _p = self.park.lock().unwrap();
        self.done.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }
}

std::thread_local! {
    /// Model only: woken waiters that had to wait again (coverage of the
    /// barging path), counted over a whole `model` run (loom runs every
    /// model thread on the test's OS thread).
    static REWAITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `bound`: None explores every interleaving; LOOM_MAX_PREEMPTIONS
/// overrides it unless `exact` (the broken variants). Prints the number of
/// interleavings (with `--nocapture`).
fn model(name: &str, bound: Option<usize>, exact: bool, f: impl Fn() + Sync + Send + 'static) {
    REWAITS.with(|r| r.set(0));
    let (n, bound) = crate::loom_explore::explore(bound, exact, f);
    println!(
        "{name}: {n} interleavings (preemption bound {bound:?}), {} re-waits",
        REWAITS.with(|r| r.get())
    );
}

/// One acquirer that may wait, one releaser.
fn one_waiter(bugs: Bugs, handoff: bool) {
    model("sema one_waiter", None, bugs != FIXED, move || {
        let s = Arc::new(Sema::new(0, bugs));
        let a = {
            let s = s.clone();
            thread::spawn(move || s.acquire())
        };
        s.release(handoff);
        s.finish();
        let granted = a.join().unwrap();
        assert!(!granted || handoff, "granted without a handoff");
        assert_eq!(
            s.count.load(Ordering::SeqCst),
            0,
            "count after 1 release, 1 acquire"
        );
    });
}

/// Two acquirers and two handoff releases (one releaser thread): a woken
/// waiter may find its unit taken by the other acquirer barging in (when
/// the handoff's cansemacquire loses) and must wait again; no release may
/// be lost and none counted twice.
fn two_waiters(bugs: Bugs, handoff: bool, bound: Option<usize>) {
    model("sema two_waiters", bound, bugs != FIXED, move || {
        let s = Arc::new(Sema::new(0, bugs));
        let acq: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || s.acquire())
            })
            .collect();
        s.release(handoff);
        s.release(handoff);
        s.finish();
        for a in acq {
            a.join().unwrap();
        }
        assert_eq!(
            s.count.load(Ordering::SeqCst),
            0,
            "count after 2 releases, 2 acquires"
        );
    });
}

#[test]
fn loom_sema_one_waiter() {
    one_waiter(FIXED, false);
}

#[test]
fn loom_sema_one_waiter_handoff() {
    one_waiter(FIXED, true);
}

#[test]
fn loom_sema_two_waiters() {
    two_waiters(FIXED, false, Some(3));
}

#[test]
fn loom_sema_two_waiters_handoff() {
    two_waiters(FIXED, true, Some(3));
}

// ----- broken variants --------------------------------------------------------

/// SeqCst weakened to AcqRel on the store-then-load pairs.
#[test]
#[should_panic(expected = "lost release")]
fn loom_sema_bug_no_storeload() {
    one_waiter(
        Bugs {
            no_storeload: true,
            ..FIXED
        },
        false,
    );
}

/// The acquirer's retry (3) removed.
#[test]
#[should_panic(expected = "lost release")]
fn loom_sema_bug_no_retry() {
    one_waiter(
        Bugs {
            no_retry: true,
            ..FIXED
        },
        false,
    );
}

/// The releaser reads nwait before adding to the count.
#[test]
#[should_panic(expected = "lost release")]
fn loom_sema_bug_nwait_before_count() {
    one_waiter(
        Bugs {
            nwait_before_count: true,
            ..FIXED
        },
        false,
    );
}

/// The handoff's `granted` written after the wake: the woken waiter may
/// read false, retry, fail (the releaser took the unit for it) and park
/// again with nobody left to wake it.
#[test]
#[should_panic(expected = "lost release")]
fn loom_sema_bug_granted_after_wake() {
    one_waiter(
        Bugs {
            granted_after_wake: true,
            ..FIXED
        },
        true,
    );
}

// ----- the notify list (sema.rs `NotifyList`, sync/cond.rs `Cond`) -------------

/// Broken variants of the notify list.
#[derive(Clone, Copy, Debug, PartialEq)]
struct NBugs {
    /// `NotifyList::wait` parks without checking, under the lock, whether
    /// its ticket was already notified.
    no_ticket_check: bool,
    /// `Cond::wait` takes its ticket after unlocking the user's mutex.
    add_after_unlock: bool,
}

const NFIXED: NBugs = NBugs {
    no_ticket_check: false,
    add_after_unlock: false,
};

/// A queued Cond waiter (sema.rs `NotifyWaiter`).
struct NWaiter {
    ticket: u32,
    woken: AtomicBool,
}

/// sema.rs `NotifyList`, the user's mutex (a count of tokens: the state a
/// waiter waits for), and the model's sleeping place as in `Sema`.
struct Notify {
    wait: AtomicU32,
    notify: AtomicU32,
    /// The list lock and the waiters (FIFO by arrival; notify_one looks
    /// for its ticket).
    list: Mutex<VecDeque<Arc<NWaiter>>>,
    /// The user's mutex and its state (Cond's caller).
    user: Mutex<u32>,
    park: Mutex<()>,
    cv: Condvar,
    done: AtomicBool,
    bugs: NBugs,
}

/// sema.rs `less` (wrapping tickets).
fn less(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Notify {
    fn new(bugs: NBugs) -> Notify {
        Notify {
            wait: AtomicU32::new(0),
            notify: AtomicU32::new(0),
            list: Mutex::new(VecDeque::new()),
            user: Mutex::new(0),
            park: Mutex::new(()),
            cv: Condvar::new(),
            done: AtomicBool::new(false),
            bugs,
        }
    }

    /// `NotifyList::add`.
    fn add(&self) -> u32 {
        self.wait.fetch_add(1, Ordering::SeqCst)
    }

    /// `NotifyList::wait`.
    fn wait_ticket(&self, t: u32) {
        let mut l = self.list.lock().unwrap();
        // Return right away if this ticket was already notified.
        if !self.bugs.no_ticket_check && less(t, self.notify.load(Ordering::SeqCst)) {
            return;
        }
        let w = Arc::new(NWaiter {
            ticket: t,
            woken: AtomicBool::new(false),
        });
        l.push_back(w.clone());
        drop(l);
        let mut p = self.park.lock().unwrap();
        while !w.woken.load(Ordering::Acquire) {
            if self.done.load(Ordering::SeqCst) {
                panic!(
                    "lost notify: a Cond waiter still parked after every notify ({:?})",
                    self.bugs
                );
            }
            p = self.cv.wait(p).unwrap();
        }
    }

    fn wake(&self, w: &NWaiter) {
        let _p = self.park.lock().unwrap();
        w.woken.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    /// `NotifyList::notify_one`.
    fn notify_one(&self) {
        // Fast path: no waiter since the last notification.
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        let mut l = self.list.lock().unwrap();
        let t = self.notify.load(Ordering::SeqCst);
        if t == self.wait.load(Ordering::SeqCst) {
            return;
        }
        self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
        // The waiter with ticket t, if it has queued; if not, it will see
        // its ticket notified in wait_ticket and not park.
        if let Some(i) = l.iter().position(|w| w.ticket == t) {
            let w = l.remove(i).unwrap();
            drop(l);
            self.wake(&w);
        }
    }

    /// `NotifyList::notify_all`.
    fn notify_all(&self) {
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        let mut l = self.list.lock().unwrap();
        let ws = core::mem::take(&mut *l);
        self.notify
            .store(self.wait.load(Ordering::SeqCst), Ordering::SeqCst);
        drop(l);
        for w in ws {
            self.wake(&w);
        }
    }

    /// A `Cond` user taking one token: `lock; while tokens == 0 { wait };
    /// tokens -= 1` (`Cond::wait`: ticket under the user's mutex, unlock,
    /// wait for the ticket, lock again).
    fn take_token(&self) {
        let mut g = self.user.lock().unwrap();
        while *g == 0 {
            let t = if self.bugs.add_after_unlock {
                drop(g);
                self.add()
            } else {
                let t = self.add();
                drop(g);
                t
            };
            self.wait_ticket(t);
            g = self.user.lock().unwrap();
        }
        *g -= 1;
    }

    /// A `Cond` user giving `n` tokens, then notifying.
    fn give_tokens(&self, n: u32, all: bool) {
        *self.user.lock().unwrap() += n;
        if all {
            self.notify_all();
        } else {
            for _ in 0..n {
                self.notify_one();
            }
        }
    }

    fn finish(&self) {
        let _p = self.park.lock().unwrap();
        self.done.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }
}

/// `waiters` Cond users each wait for a token; the main thread gives that
/// many and notifies (notify_one per token, or one notify_all). Every
/// waiter must return.
fn cond(bugs: NBugs, waiters: usize, all: bool, bound: Option<usize>) {
    model("cond", bound, bugs != NFIXED, move || {
        let n = Arc::new(Notify::new(bugs));
        let ws: Vec<_> = (0..waiters)
            .map(|_| {
                let n = n.clone();
                thread::spawn(move || n.take_token())
            })
            .collect();
        n.give_tokens(waiters as u32, all);
        n.finish();
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!(*n.user.lock().unwrap(), 0, "tokens left");
    });
}

#[test]
fn loom_cond_notify_one() {
    cond(NFIXED, 1, false, None);
}

#[test]
fn loom_cond_two_waiters_notify_one() {
    cond(NFIXED, 2, false, Some(4));
}

#[test]
fn loom_cond_two_waiters_notify_all() {
    cond(NFIXED, 2, true, Some(4));
}

/// The waiter parks without checking whether its ticket was notified
/// between `add` and `wait`.
#[test]
#[should_panic(expected = "lost notify")]
fn loom_cond_bug_no_ticket_check() {
    cond(
        NBugs {
            no_ticket_check: true,
            ..NFIXED
        },
        1,
        false,
        None,
    );
}

/// Cond::wait takes its ticket after unlocking the user's mutex: a
/// notifier in between sees no waiter (fast path) and returns.
#[test]
#[should_panic(expected = "lost notify")]
fn loom_cond_bug_add_after_unlock() {
    cond(
        NBugs {
            add_after_unlock: true,
            ..NFIXED
        },
        1,
        false,
        None,
    );
}
