//! Semaphores keyed by address, and the ticket-based notify list behind
//! `Cond`. Go's sema.go; the foundation of `goro::sync`.
//!
//! # The semaphore table
//!
//! (After Go's sema.go and Mullender and Cox, "Semaphores in Plan 9",
//! <https://swtch.com/semaphore.pdf>.) A semaphore is any `AtomicU32` owned by
//! a sync primitive (a Mutex's `sema` word, a WaitGroup's, ...). It is not a
//! semaphore in the textbook sense so much as a sleep/wakeup pair in which
//! every sleep is matched by exactly one wakeup, even when the wakeup comes
//! first: `semrelease` adds one to the count, `semacquire` takes one away,
//! sleeping while the count is zero.
//!
//! Waiters are not stored in the primitive (which would make every Mutex
//! carry a queue) but in a process-wide table of [`SEM_TAB_SIZE`] roots,
//! chosen by hashing the word's address. A root holds a treap of waiters
//! with distinct addresses (ordered by address, heap-ordered by a random
//! priority, so a collision of many addresses in one root stays O(log n)),
//! and each treap node heads a FIFO list of the other waiters on the same
//! address (Go issue 17953). `lifo` queueing puts a waiter at the head of
//! its address's list: Mutex uses it for a waiter that was woken, lost the
//! race for the lock and waits again, so it keeps its place at the front.
//!
//! # The lost wake-up race
//!
//! An acquirer that finds the count at zero must not sleep through a
//! release that happens while it queues. The two sides follow this order:
//! - acquirer: (1) take the root lock, (2) `nwait += 1`, (3) retry the count,
//!   (4) queue itself and park, releasing the root lock only once parked.
//! - releaser: (a) `count += 1`, (b) read `nwait`; if it is zero, done (no
//!   one can be asleep); otherwise (c) take the root lock and dequeue a waiter.
//!
//! (2)/(3) and (a)/(b) are a store-then-load pair on two different words (a
//! Dekker pattern), so all four are SeqCst: either the acquirer's retry sees
//! the release, or the releaser sees `nwait > 0` and, having to take the lock,
//! finds the acquirer queued. `nwait` also lets the releaser skip the lock
//! entirely in the common uncontended case.
//!
//! runtime/sema_model.rs is a loom model of this protocol and of the
//! handoff below (a miniature, step by step): keep the two in step.
//!
//! # Handoff
//!
//! `semrelease(addr, true)` (Mutex in starvation mode) passes the count
//! straight to the woken waiter (`granted`), so no newcomer can barge in, and
//! the releasing goroutine yields its P so the waiter, which goready put in
//! the P's runnext, runs at once and inherits the time slice (Go issue 33747).
//!
//! # Goroutines and threads
//!
//! A goroutine parks with `gopark`, the root lock being released by the
//! unlock function on g0 (so a waker can only find it once it has fully
//! stopped), and is woken with `goready`. A plain OS thread, or a goroutine
//! inside `blocking()` (no P: it cannot park), waits on a [`Parker`] on its
//! own stack and blocks the thread, as channel waiters do (sudog.rs). The
//! waker does not care which kind it wakes, so the two mix freely on one
//! semaphore. A waiter record lives on its waiter's stack for one wait; the
//! waker may not touch it after readying it.
//!
//! # Where this runs
//! Any goroutine or plain thread; never on g0 (it may park). Root and notify
//! list locks are leaf locks held for a few pointer operations; nothing is
//! allocated under them.

use crate::g::G;
use crate::park::{self, Parker};
use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};
use crossbeam_utils::CachePadded;

/// Number of roots in the table: a prime, so addresses with a common stride
/// spread over all roots (Go's semTabSize).
const SEM_TAB_SIZE: usize = 251;

use crate::park::parkable_g;

/// Wakes a waiter: `goready` for a goroutine, `unpark` for a thread.
/// The waiter record may be gone as soon as this starts.
fn wake(g: *mut G, parker: *const Parker) {
    if !g.is_null() {
        park::goready(g);
    } else {
        // SAFETY: the thread waiter's Parker stays live until it is unparked
        // (it lives on the waiting thread's stack, which waits for this).
        unsafe { (*parker).unpark(0) };
    }
}

// ---------------------------------------------------------------------------
// The semaphore table.

/// One waiter on one semaphore (the fields of Go's sudog that sema uses).
/// Lives on the waiter's stack for one wait. Tree and list fields are
/// protected by the root lock; `granted` is written by the waker before it
/// readies the waiter and read by the waiter after it wakes (goready's status
/// CAS / the Parker's flag order them).
struct SemaWaiter {
    /// The parked goroutine, or null for a thread (then `parker`).
    g: *mut G,
    parker: *const Parker,
    /// Address of the semaphore word (the treap key).
    addr: usize,
    /// Treap priority (Go's s.ticket while queued); non-zero.
    prio: u32,
    /// Treap links (only for the head of each address's list).
    parent: *mut SemaWaiter,
    prev: *mut SemaWaiter,
    next: *mut SemaWaiter,
    /// The FIFO of other waiters on the same address (Go's waitlink), and
    /// its tail (valid in the head only).
    waitlink: *mut SemaWaiter,
    waittail: *mut SemaWaiter,
    /// Set by a handoff release: the count was passed straight to us
    /// (Go's s.ticket = 1 after dequeue).
    granted: bool,
}

/// One bucket of the table (Go's semaRoot).
struct SemaRoot {
    /// Guards `treap` and every queued waiter's links. A raw lock so that
    /// gopark's unlock function can release it on g0.
    lock: crate::lock_futex::Mutex,
    /// Root of the treap of waiters with distinct addresses.
    treap: UnsafeCell<*mut SemaWaiter>,
    /// Number of queued waiters. Changed under `lock`; read without it by
    /// semrelease's fast path (SeqCst: see "The lost wake-up race").
    nwait: AtomicU32,
}

// SAFETY: `treap` and the waiters it reaches are only touched under `lock`.
unsafe impl Sync for SemaRoot {}

static SEMTABLE: [CachePadded<SemaRoot>; SEM_TAB_SIZE] = [const {
    CachePadded::new(SemaRoot {
        lock: crate::lock_futex::Mutex::new(),
        treap: UnsafeCell::new(ptr::null_mut()),
        nwait: AtomicU32::new(0),
    })
}; SEM_TAB_SIZE];

/// Go's semtable.rootFor.
#[inline]
fn root_for(addr: &AtomicU32) -> &'static SemaRoot {
    let a = addr as *const AtomicU32 as usize;
    &SEMTABLE[(a >> 3) % SEM_TAB_SIZE]
}

/// Go's cansemacquire: take one from the count if it is positive.
/// SeqCst: the load is step (3) of the lost wake-up protocol; a successful
/// CAS also acquires whatever the releaser published (Semaphore users).
#[inline]
pub(crate) fn cansemacquire(addr: &AtomicU32) -> bool {
    let mut v = addr.load(Ordering::SeqCst);
    loop {
        if v == 0 {
            return false;
        }
        // SeqCst: as the load above (a failure's value is the next retry).
        match addr.compare_exchange_weak(v, v - 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return true,
            Err(cur) => v = cur,
        }
    }
}

/// gopark unlock function: release a root lock (on g0, same M).
fn unlock_root(_gp: *mut G, root: *mut u8) -> bool {
    // SAFETY: the parking G took this lock in semacquire; g0 runs on the
    // same thread, and the G is now Waiting, so a waker may find it.
    unsafe { (*(root as *const SemaRoot)).lock.unlock() };
    crate::m::releasem(crate::m::getm());
    true
}

/// Go's semacquire1: wait until `*addr > 0`, then decrement it. Parks the
/// calling goroutine, or blocks the calling thread. With `lifo`, the caller
/// queues at the head of the address's waiters (Mutex re-waiters).
/// `reason` is what a parked goroutine reports (Go's semacquire1 reason).
pub(crate) fn semacquire(addr: &AtomicU32, lifo: bool, reason: crate::waitreason::WaitReason) {
    // Easy case.
    if cansemacquire(addr) {
        return;
    }
    semacquire_slow(addr, lifo, reason);
}

#[cold]
#[inline(never)]
fn semacquire_slow(addr: &AtomicU32, lifo: bool, reason: crate::waitreason::WaitReason) {
    let root = root_for(addr);
    let gp = parkable_g();
    loop {
        let parker = Parker::new();
        let mut w = SemaWaiter {
            g: gp,
            parker: &parker,
            addr: addr as *const AtomicU32 as usize,
            prio: 0,
            parent: ptr::null_mut(),
            prev: ptr::null_mut(),
            next: ptr::null_mut(),
            waitlink: ptr::null_mut(),
            waittail: ptr::null_mut(),
            granted: false,
        };
        crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
        root.lock.lock();
        // (2): announce a waiter so semrelease takes the slow path.
        root.nwait.fetch_add(1, Ordering::SeqCst);
        // (3): retry, to not miss a release made before (2) was visible.
        if cansemacquire(addr) {
            // Under the lock; SeqCst like every nwait access (Go's Xadd).
            root.nwait.fetch_sub(1, Ordering::SeqCst);
            // SAFETY: taken above.
            unsafe { root.lock.unlock() };
            crate::m::releasem(crate::m::getm());
            return;
        }
        // (4): any semrelease from now on sees nwait > 0 and dequeues us.
        let wp: *mut SemaWaiter = &mut w;
        // SAFETY: we hold root.lock; `w` stays put (on our stack, not
        // moved) until it is dequeued, which happens before we are woken.
        unsafe { root.queue(wp, lifo) };
        if !gp.is_null() {
            park::gopark(
                Some(unlock_root),
                root as *const SemaRoot as *mut u8,
                reason,
            );
        } else {
            // SAFETY: taken above.
            unsafe { root.lock.unlock() };
            crate::m::releasem(crate::m::getm());
            parker.park();
        }
        // Woken: the waker dequeued `w` and set `granted` before readying us
        // (goready's status CAS / the Parker's flag order that write first).
        // SAFETY: wp points at `w`, which is ours again.
        if unsafe { (*wp).granted } || cansemacquire(addr) {
            return;
        }
    }
}

/// Go's semrelease1: add one to `*addr` and wake one waiter if any. With
/// `handoff`, the count goes straight to the woken waiter and a releasing
/// goroutine yields its P to it. Never blocks (beyond the root lock).
pub(crate) fn semrelease(addr: &AtomicU32, handoff: bool) {
    // (a): SeqCst, the releaser's store of the Dekker pair (module doc).
    addr.fetch_add(1, Ordering::SeqCst);
    semrelease_wake(addr, handoff);
}

/// [`semrelease`] that refuses to wrap the count: returns false, changing
/// nothing, if it is `u32::MAX` (`Semaphore::release`'s overflow check,
/// atomic with the increment).
pub(crate) fn semrelease_checked(addr: &AtomicU32, handoff: bool) -> bool {
    // (a), as a checked increment. SeqCst: as the fetch_add it replaces.
    if addr
        .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |c| c.checked_add(1))
        .is_err()
    {
        return false;
    }
    semrelease_wake(addr, handoff);
    true
}

/// semrelease after its increment (a): wakes a waiter if there is one.
#[inline]
fn semrelease_wake(addr: &AtomicU32, handoff: bool) {
    let root = root_for(addr);
    // (b) Easy case: no waiters. Must come after (a) (see the essay).
    if root.nwait.load(Ordering::SeqCst) == 0 {
        return;
    }
    semrelease_slow(root, addr, handoff);
}

#[cold]
#[inline(never)]
fn semrelease_slow(root: &SemaRoot, addr: &AtomicU32, handoff: bool) {
    crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
    root.lock.lock();
    // Re-check under the lock (SeqCst: as at (b)).
    if root.nwait.load(Ordering::SeqCst) == 0 {
        // The count was already consumed by another waiter that gave up
        // waiting (its retry (3) succeeded): nobody to wake.
        // SAFETY: taken above.
        unsafe { root.lock.unlock() };
        crate::m::releasem(crate::m::getm());
        return;
    }
    // SAFETY: we hold root.lock.
    let s = unsafe { root.dequeue(addr as *const AtomicU32 as usize) };
    if !s.is_null() {
        // Under the lock; SeqCst like every nwait access (Go's Xadd).
        root.nwait.fetch_sub(1, Ordering::SeqCst);
    }
    // SAFETY: taken above.
    unsafe { root.lock.unlock() };
    crate::m::releasem(crate::m::getm());
    if s.is_null() {
        return;
    }
    // Waking may be slow (futex) or yield, so the lock is released first.
    let granted = handoff && cansemacquire(addr);
    // SAFETY: we dequeued s, so we own it until we wake its waiter; read
    // everything we need before that, as it may vanish right after.
    let (g, parker) = unsafe {
        (*s).granted = granted;
        ((*s).g, (*s).parker)
    };
    wake(g, parker);
    if granted && !g.is_null() {
        // Direct G handoff: goready put the waiter in our P's runnext; yield
        // so it runs now, inheriting our time slice (Go's goyield). Only a
        // goroutine holding a P and no runtime lock can yield.
        if !parkable_g().is_null() && !crate::m::in_critical_section() {
            park::gosched();
        }
    }
}

/// Test hook (Go's export_test.go SemNwait): the waiter count of the root
/// `addr` hashes to. SeqCst like every nwait access.
pub(crate) fn sem_nwait(addr: &AtomicU32) -> u32 {
    root_for(addr).nwait.load(Ordering::SeqCst)
}

impl SemaRoot {
    /// Go's semaRoot.queue: add `s` to the waiters on its address.
    ///
    /// # Safety
    /// The caller holds `self.lock`; `s` is live and unqueued, and stays at
    /// its address until dequeued.
    unsafe fn queue(&self, s: *mut SemaWaiter, lifo: bool) {
        // SAFETY: under the lock every queued waiter is live and ours to
        // relink (caller's contract); s is valid.
        unsafe {
            let addr = (*s).addr;
            let mut last: *mut SemaWaiter = ptr::null_mut();
            let mut pt: *mut *mut SemaWaiter = self.treap.get();
            let mut t = *pt;
            while !t.is_null() {
                if (*t).addr == addr {
                    // Already have addr in the tree.
                    if lifo {
                        // Substitute s for t in the tree; t heads s's list.
                        *pt = s;
                        (*s).prio = (*t).prio;
                        (*s).parent = (*t).parent;
                        (*s).prev = (*t).prev;
                        (*s).next = (*t).next;
                        if !(*s).prev.is_null() {
                            (*(*s).prev).parent = s;
                        }
                        if !(*s).next.is_null() {
                            (*(*s).next).parent = s;
                        }
                        (*s).waitlink = t;
                        (*s).waittail = (*t).waittail;
                        if (*s).waittail.is_null() {
                            (*s).waittail = t;
                        }
                        (*t).parent = ptr::null_mut();
                        (*t).prev = ptr::null_mut();
                        (*t).next = ptr::null_mut();
                        (*t).waittail = ptr::null_mut();
                    } else {
                        // Add s to the end of t's list.
                        if (*t).waittail.is_null() {
                            (*t).waitlink = s;
                        } else {
                            (*(*t).waittail).waitlink = s;
                        }
                        (*t).waittail = s;
                        (*s).waitlink = ptr::null_mut();
                    }
                    return;
                }
                last = t;
                pt = if addr < (*t).addr {
                    &mut (*t).prev
                } else {
                    &mut (*t).next
                };
                t = *pt;
            }
            // A new leaf in the tree of unique addresses; the low bit makes
            // the priority non-zero (Go's fastrand() | 1).
            (*s).prio = crate::m::fastrand() | 1;
            (*s).parent = last;
            *pt = s;
            // Rotate up into the tree by priority (a min-heap on prio).
            while !(*s).parent.is_null() && (*(*s).parent).prio > (*s).prio {
                let p = (*s).parent;
                if (*p).prev == s {
                    self.rotate_right(p);
                } else {
                    if (*p).next != s {
                        crate::throw::throw("semaRoot queue");
                    }
                    self.rotate_left(p);
                }
            }
        }
    }

    /// Go's semaRoot.dequeue: remove and return the first waiter on `addr`,
    /// or null.
    ///
    /// # Safety
    /// The caller holds `self.lock`.
    unsafe fn dequeue(&self, addr: usize) -> *mut SemaWaiter {
        // SAFETY: under the lock every queued waiter is live and ours.
        unsafe {
            let mut ps: *mut *mut SemaWaiter = self.treap.get();
            let mut s = *ps;
            while !s.is_null() {
                if (*s).addr == addr {
                    break;
                }
                ps = if addr < (*s).addr {
                    &mut (*s).prev
                } else {
                    &mut (*s).next
                };
                s = *ps;
            }
            if s.is_null() {
                return s;
            }
            let t = (*s).waitlink;
            if !t.is_null() {
                // Substitute t, also waiting on addr, for s in the tree.
                *ps = t;
                (*t).prio = (*s).prio;
                (*t).parent = (*s).parent;
                (*t).prev = (*s).prev;
                if !(*t).prev.is_null() {
                    (*(*t).prev).parent = t;
                }
                (*t).next = (*s).next;
                if !(*t).next.is_null() {
                    (*(*t).next).parent = t;
                }
                (*t).waittail = if (*t).waitlink.is_null() {
                    ptr::null_mut()
                } else {
                    (*s).waittail
                };
                (*s).waitlink = ptr::null_mut();
                (*s).waittail = ptr::null_mut();
            } else {
                // Rotate s down to a leaf, respecting priorities, then cut it.
                while !(*s).next.is_null() || !(*s).prev.is_null() {
                    if (*s).next.is_null()
                        || (!(*s).prev.is_null() && (*(*s).prev).prio < (*(*s).next).prio)
                    {
                        self.rotate_right(s);
                    } else {
                        self.rotate_left(s);
                    }
                }
                let p = (*s).parent;
                if !p.is_null() {
                    if (*p).prev == s {
                        (*p).prev = ptr::null_mut();
                    } else {
                        (*p).next = ptr::null_mut();
                    }
                } else {
                    *self.treap.get() = ptr::null_mut();
                }
            }
            (*s).parent = ptr::null_mut();
            (*s).next = ptr::null_mut();
            (*s).prev = ptr::null_mut();
            s
        }
    }

    /// Go's rotateLeft: (x a (y b c)) becomes (y (x a b) c).
    ///
    /// # Safety
    /// Under the lock; x is in the tree and has a right child.
    unsafe fn rotate_left(&self, x: *mut SemaWaiter) {
        // SAFETY: caller's contract; all nodes reached are queued and live.
        unsafe {
            let p = (*x).parent;
            let y = (*x).next;
            let b = (*y).prev;
            (*y).prev = x;
            (*x).parent = y;
            (*x).next = b;
            if !b.is_null() {
                (*b).parent = x;
            }
            (*y).parent = p;
            if p.is_null() {
                *self.treap.get() = y;
            } else if (*p).prev == x {
                (*p).prev = y;
            } else {
                if (*p).next != x {
                    crate::throw::throw("semaRoot rotateLeft");
                }
                (*p).next = y;
            }
        }
    }

    /// Go's rotateRight: (y (x a b) c) becomes (x a (y b c)).
    ///
    /// # Safety
    /// Under the lock; y is in the tree and has a left child.
    unsafe fn rotate_right(&self, y: *mut SemaWaiter) {
        // SAFETY: caller's contract; all nodes reached are queued and live.
        unsafe {
            let p = (*y).parent;
            let x = (*y).prev;
            let b = (*x).next;
            (*x).next = y;
            (*y).parent = x;
            (*y).prev = b;
            if !b.is_null() {
                (*b).parent = y;
            }
            (*x).parent = p;
            if p.is_null() {
                *self.treap.get() = x;
            } else if (*p).prev == y {
                (*p).prev = x;
            } else {
                if (*p).next != y {
                    crate::throw::throw("semaRoot rotateRight");
                }
                (*p).next = x;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Notify lists (Go's notifyList, for sync.Cond).

/// A parked `Cond` waiter (Go's sudog as notifyList uses it). Lives on the
/// waiter's stack; linked under the list lock.
struct NotifyWaiter {
    g: *mut G,
    parker: *const Parker,
    /// The waiter's ticket from `add`.
    ticket: u32,
    next: *mut NotifyWaiter,
}

/// Go's notifyList: a ticket-based list of waiters.
///
/// A waiter takes a ticket (`add`, without the lock: typically while still
/// holding the user's mutex), releases its mutex and then `wait`s for that
/// ticket. Notifiers advance `notify`, the next ticket to be woken; a waiter
/// that arrives at `wait` after its ticket was notified returns at once.
/// Tickets are handed out in order and notify_one wakes the lowest
/// unnotified ticket, so waiters are woken first-in first-out (by the order
/// in which they called `add`).
///
/// Every atomic access to `wait` and `notify` is SeqCst, as in Go: the
/// notifiers' fast paths compare the two counters without the lock, and a
/// waiter's `add` (made while it holds the user's mutex) must be seen by any
/// notifier that runs after the waiter unlocks.
pub(crate) struct NotifyList {
    /// Ticket of the next waiter (Go's wait). Incremented outside the lock.
    /// SeqCst, as `notify` (see above).
    wait: AtomicU32,
    /// Ticket of the next waiter to notify (Go's notify). Written under the
    /// lock, read outside it by the fast paths. Both counters wrap; their
    /// unwrapped difference stays below 2^31 (fewer waiters than that).
    /// SeqCst (see above).
    notify: AtomicU32,
    /// Guards the list.
    lock: crate::lock_futex::Mutex,
    list: UnsafeCell<(*mut NotifyWaiter, *mut NotifyWaiter)>,
}

// SAFETY: `list` and the waiters it reaches are only touched under `lock`.
unsafe impl Sync for NotifyList {}
// SAFETY: the list holds no thread-bound state; it is empty whenever the
// owner can move it (waiters borrow it).
unsafe impl Send for NotifyList {}

/// a < b for wrapping tickets (Go's less).
#[inline]
fn less(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// gopark unlock function: release a notify list's lock (on g0, same M).
fn unlock_notify(_gp: *mut G, l: *mut u8) -> bool {
    // SAFETY: the parking G took this lock in wait; g0 runs on the same
    // thread, and the G is now Waiting, so a notifier may find it.
    unsafe { (*(l as *const NotifyList)).lock.unlock() };
    crate::m::releasem(crate::m::getm());
    true
}

impl NotifyList {
    pub(crate) const fn new() -> NotifyList {
        NotifyList {
            wait: AtomicU32::new(0),
            notify: AtomicU32::new(0),
            lock: crate::lock_futex::Mutex::new(),
            list: UnsafeCell::new((ptr::null_mut(), ptr::null_mut())),
        }
    }

    /// Go's notifyListAdd: take a ticket; the caller must `wait` for it.
    /// SeqCst, as all of Go's notifyList atomics: the fast paths of the
    /// notifiers compare `wait` and `notify` without the lock.
    pub(crate) fn add(&self) -> u32 {
        self.wait.fetch_add(1, Ordering::SeqCst)
    }

    /// Go's notifyListWait: return once ticket `t` is notified; parks the
    /// goroutine (or blocks the thread) until then.
    pub(crate) fn wait(&self, t: u32) {
        crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
        self.lock.lock();
        // Return right away if this ticket was already notified.
        if less(t, self.notify.load(Ordering::SeqCst)) {
            // SAFETY: taken above.
            unsafe { self.lock.unlock() };
            crate::m::releasem(crate::m::getm());
            return;
        }
        let gp = parkable_g();
        let parker = Parker::new();
        let mut w = NotifyWaiter {
            g: gp,
            parker: &parker,
            ticket: t,
            next: ptr::null_mut(),
        };
        let wp: *mut NotifyWaiter = &mut w;
        // SAFETY: under the lock; wp stays put until a notifier unlinks it,
        // which happens before it wakes us.
        unsafe {
            let list = &mut *self.list.get();
            if list.1.is_null() {
                list.0 = wp;
            } else {
                (*list.1).next = wp;
            }
            list.1 = wp;
        }
        if !gp.is_null() {
            park::gopark(
                Some(unlock_notify),
                self as *const NotifyList as *mut u8,
                crate::waitreason::WaitReason::SyncCondWait,
            );
        } else {
            // SAFETY: taken above.
            unsafe { self.lock.unlock() };
            crate::m::releasem(crate::m::getm());
            parker.park();
        }
    }

    /// Go's notifyListNotifyAll: wake every waiter that took a ticket so far.
    pub(crate) fn notify_all(&self) {
        // Fast path: no new waiters since the last notification.
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
        self.lock.lock();
        // SAFETY: under the lock.
        let mut s = unsafe {
            core::mem::replace(&mut *self.list.get(), (ptr::null_mut(), ptr::null_mut())).0
        };
        // Every earlier ticket is either on the list we took or will see
        // itself notified when it reaches `wait`.
        self.notify
            .store(self.wait.load(Ordering::SeqCst), Ordering::SeqCst);
        // SAFETY: taken above.
        unsafe { self.lock.unlock() };
        crate::m::releasem(crate::m::getm());
        while !s.is_null() {
            // SAFETY: we unlinked the whole list, so we own each waiter until
            // we wake it; read the link first, the record may vanish after.
            let (next, g, parker) = unsafe { ((*s).next, (*s).g, (*s).parker) };
            wake(g, parker);
            s = next;
        }
    }

    /// Go's notifyListNotifyOne: wake the waiter with the lowest unnotified
    /// ticket (it may not have reached `wait` yet; then it will not park).
    pub(crate) fn notify_one(&self) {
        // Fast path: no new waiters since the last notification.
        if self.wait.load(Ordering::SeqCst) == self.notify.load(Ordering::SeqCst) {
            return;
        }
        crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
        self.lock.lock();
        let t = self.notify.load(Ordering::SeqCst);
        if t == self.wait.load(Ordering::SeqCst) {
            // SAFETY: taken above.
            unsafe { self.lock.unlock() };
            crate::m::releasem(crate::m::getm());
            return;
        }
        self.notify.store(t.wrapping_add(1), Ordering::SeqCst);
        // Find the waiter with ticket t. It is near the front: waiters take
        // tickets and queue separately, so the list is only slightly out of
        // ticket order. If it is absent it has not queued yet and will see
        // its ticket notified.
        // SAFETY: under the lock every listed waiter is live and ours.
        unsafe {
            let list = &mut *self.list.get();
            let mut p: *mut NotifyWaiter = ptr::null_mut();
            let mut s = list.0;
            while !s.is_null() {
                if (*s).ticket == t {
                    let n = (*s).next;
                    if p.is_null() {
                        list.0 = n;
                    } else {
                        (*p).next = n;
                    }
                    if n.is_null() {
                        list.1 = p;
                    }
                    let (g, parker) = ((*s).g, (*s).parker);
                    self.lock.unlock();
                    crate::m::releasem(crate::m::getm());
                    wake(g, parker);
                    return;
                }
                p = s;
                s = (*s).next;
            }
            self.lock.unlock();
            crate::m::releasem(crate::m::getm());
        }
    }
}
