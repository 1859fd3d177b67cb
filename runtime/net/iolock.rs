//! `IoLock`: the lock that admits one waiter per direction to a socket's
//! poll slot (Go's fdMutex read or write half, as goro uses it: taken only
//! once an operation has to wait; net/fd.rs `io_with`), with a deadline
//! and an exit for `close`.
//!
//! A `goro::sync::Mutex` did this job until h33, and its waiters had no
//! deadline: a read with a timeout queued behind a read parked without
//! one waited, untimed, until that read ended (possibly never), where
//! std's per-call timeouts run side by side in the kernel. Here a waiter
//! leaves the queue when its deadline passes (`TimedOut`) or when the
//! socket is closed.
//!
//! # The state word
//!
//! The lock itself is one `AtomicU32` (so the two directions' locks take
//! 8 bytes of the socket, where two Mutexes took 16: the `wakes net`
//! benchmark's wake-up cost 1.4 more L1 misses with a 16-byte lock per
//! direction). `HELD` (bit 0): owned. `QUEUED` (bit 1): waiters may be
//! queued; only set while `HELD` is, and changed only under the queue's
//! lock. So an uncontended lock and unlock are one CAS each (0 → HELD,
//! HELD → 0), as a Mutex's were: the HTTP server's hot path (one reader
//! per socket, which takes this lock at every parking read) costs what it
//! did. While `QUEUED` is set neither fast path can succeed, so the state
//! changes only under the queue's lock.
//!
//! # The queues
//!
//! Waiters are not stored in the lock but in a process-wide table of
//! queues chosen by hashing the lock's address (sema.rs's table, in
//! small): each queue is a raw lock (`qlock`) and a FIFO list
//! of waiter records, each naming its lock; the records of the locks
//! that share a queue are interleaved, and each lock's waiters keep their
//! order.
//!
//! # Waiting
//!
//! A waiter queues a record on its own stack (FIFO) and parks: a goroutine
//! with gopark (plus a `SelTimeout` timer for its deadline, added once it
//! is Waiting, as a timed select's), a thread on a `Parker` (with a futex
//! timeout). Whoever wakes it first wins the CAS of the waiter's
//! generation word (`G::selgen`'s protocol, shared with select: `2*seq` →
//! `2*seq + 1`): the unlocker, which hands it the lock (ownership passes
//! directly; `QUEUED` and `HELD` stay as they are, or `QUEUED` is cleared
//! when it was the last), `close`, or its timer (the thread itself, for a
//! thread). A waker that loses the CAS unlinks the record and moves on;
//! the waiter, once awake, takes `qlock` (so no waker is still touching
//! its record), unlinks itself if nobody did, and reads the outcome.
//! Hand-off is strict FIFO without barging: contention here is rare (two
//! goroutines reading one socket) and the owner is parked on the poll
//! slot, so spinning or barging would gain nothing.
//!
//! # Close
//!
//! `close_waiters` (after the poll descriptor's `closing` flag is set)
//! takes `qlock` and wakes every queued waiter with the closed outcome. A
//! locker checks `closing` under `qlock` before it queues, so either it
//! sees the flag or `close_waiters` finds it queued.

use crate::g::G;
use crate::netpoll::PollDesc;
use crate::park::{self, Parker};
use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The lock is owned.
const HELD: u32 = 1;
/// Waiters may be queued (only with `HELD`; changed under `qlock`).
const QUEUED: u32 = 2;

/// A waiter record's outcome (`Waiter::outcome`).
const WAITING: u8 = 0;
/// The unlocker handed the lock to the waiter.
const GRANTED: u8 = 1;
/// `close_waiters` woke the waiter.
const CLOSED: u8 = 2;
/// A waker lost the CAS to the waiter's deadline and unlinked the record.
const UNLINKED: u8 = 3;

/// Why [`IoLock::lock`] returned without the lock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The deadline passed while waiting.
    TimedOut,
    /// The socket was closed (`close_waiters`, or `closing` seen).
    Closed,
}

/// One queued locker. Lives on its waiter's stack for one wait; every
/// field but `gen`'s target is read and written under `qlock` once queued.
struct Waiter {
    /// The parked goroutine, or null for a thread (then `parker`).
    g: *mut G,
    parker: *const Parker,
    /// The waiter's generation word (`G::selgen`, or a thread's local) and
    /// this wait's `seq`: a waker owns the wake-up if it CASes
    /// `2*seq` → `2*seq + 1`.
    gen: *const AtomicU64,
    seq: u64,
    /// The lock waited for (its address: the queue is shared).
    lock: *const IoLock,
    next: *mut Waiter,
    outcome: u8,
}

/// A socket direction's waiter lock (see the module essay).
pub(crate) struct IoLock {
    /// `HELD | QUEUED`. Acquire on the CAS that takes the lock, Release on
    /// the one that frees it; changes under the queue's lock are ordered
    /// by it.
    state: AtomicU32,
}

/// One queue of the table (see "The queues").
struct Queue {
    /// Guards `head` and every queued record. A raw lock so that gopark's
    /// commit function can release it on g0.
    qlock: crate::lock_futex::Mutex,
    /// First queued record; singly linked (appending walks it: a queue
    /// holds one or two records in practice).
    head: UnsafeCell<*mut Waiter>,
}

// SAFETY: `head` and the records it reaches are only touched under
// `qlock`.
unsafe impl Sync for Queue {}

/// Number of queues: a prime, so that addresses with a common stride
/// spread over all of them.
const QUEUES: usize = 61;

static TABLE: [CachePadded<Queue>; QUEUES] = [const {
    CachePadded::new(Queue {
        qlock: crate::lock_futex::Mutex::new(),
        head: UnsafeCell::new(ptr::null_mut()),
    })
}; QUEUES];

/// Proof of holding an [`IoLock`]; unlocks on drop.
pub(crate) struct IoLockGuard<'a>(&'a IoLock);

impl Drop for IoLockGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.unlock();
    }
}

/// What the gopark commit function needs (on the parking G's stack).
struct ParkArgs {
    queue: &'static Queue,
    deadline: Option<i64>,
    seq: u64,
}

/// gopark commit for a goroutine waiter: release `qlock`, then arm the
/// deadline timer (only now that the G is Waiting may a timer ready it).
/// g0, same M.
fn park_commit(gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg points at ParkArgs on the parked G's stack, valid until
    // `qlock` is released (nobody can wake the G before that).
    let (queue, deadline, seq) = unsafe {
        let a = &*(arg as *const ParkArgs);
        (a.queue, a.deadline, a.seq)
    };
    queue.unlock();
    // From here the G may already be running again; the timer is then
    // stale (its CAS fails) and is purged.
    if let Some(when) = deadline {
        crate::time::add_timer(when, crate::timer::Action::SelTimeout { gp, seq });
    }
    true
}

/// Wakes a waiter whose wake-up the caller won: `goready` for a goroutine,
/// `unpark` for a thread. The record may be gone as soon as this starts.
fn wake(g: *mut G, parker: *const Parker) {
    if !g.is_null() {
        park::goready(g);
    } else {
        // SAFETY: the thread waiter's Parker stays live until unparked (it
        // waits for this in `park`, even after its own deadline).
        unsafe { (*parker).unpark(0) };
    }
}

/// Claims the wake-up of queued record `w`. Under `qlock`.
///
/// # Safety
/// `w` is queued (or was just unlinked under the same hold of `qlock`).
unsafe fn claim(w: *mut Waiter) -> bool {
    // SAFETY: caller's contract: the record and its generation word are
    // live while queued (the waiter cannot leave before it takes qlock).
    // AcqRel: winning makes us the waiter's only waker (a timer's CAS is
    // AcqRel too).
    unsafe {
        (*(*w).gen)
            .compare_exchange(
                2 * (*w).seq,
                2 * (*w).seq + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

impl Queue {
    /// Takes `qlock` inside a runtime critical section (Go's lock).
    fn lock(&self) {
        crate::preempt::acquirem_with_p(); // runtime critical section (Go's lock), holding the P
        self.qlock.lock();
    }

    /// Releases `qlock` and the critical section taken with it.
    fn unlock(&self) {
        // SAFETY: the caller took qlock on this thread (`lock`; or on the
        // parked G's thread, for park_commit on its g0).
        unsafe { self.qlock.unlock() };
        crate::m::releasem(crate::m::getm());
    }

    /// Appends `w` to the queue.
    ///
    /// # Safety
    /// Under qlock; `w` is live and unqueued and stays put until unlinked.
    unsafe fn enqueue(&self, w: *mut Waiter) {
        // SAFETY: caller's contract; queued records are live under qlock.
        unsafe {
            let mut p: *mut *mut Waiter = self.head.get();
            while !(*p).is_null() {
                p = &mut (**p).next;
            }
            *p = w;
        }
    }

    /// Removes and returns the first record waiting for `lock`, or null.
    ///
    /// # Safety
    /// Under qlock.
    unsafe fn pop(&self, lock: *const IoLock) -> *mut Waiter {
        // SAFETY: under qlock, queued records are live and ours to relink.
        unsafe {
            let mut p: *mut *mut Waiter = self.head.get();
            while !(*p).is_null() {
                let w = *p;
                if (*w).lock == lock {
                    *p = (*w).next;
                    (*w).next = ptr::null_mut();
                    return w;
                }
                p = &mut (*w).next;
            }
            ptr::null_mut()
        }
    }

    /// Removes `w`, which is queued.
    ///
    /// # Safety
    /// Under qlock; `w` is queued here.
    unsafe fn unlink(&self, w: *mut Waiter) {
        // SAFETY: caller's contract; queued records are live under qlock.
        unsafe {
            let mut p: *mut *mut Waiter = self.head.get();
            while *p != w {
                if (*p).is_null() {
                    crate::throw::throw("net: io lock waiter not queued");
                }
                p = &mut (**p).next;
            }
            *p = (*w).next;
            (*w).next = ptr::null_mut();
        }
    }

    /// Whether a record waits for `lock`.
    ///
    /// # Safety
    /// Under qlock.
    unsafe fn has(&self, lock: *const IoLock) -> bool {
        // SAFETY: under qlock, queued records are live.
        unsafe {
            let mut w = *self.head.get();
            while !w.is_null() {
                if (*w).lock == lock {
                    return true;
                }
                w = (*w).next;
            }
            false
        }
    }
}

impl IoLock {
    pub(crate) const fn new() -> IoLock {
        IoLock {
            state: AtomicU32::new(0),
        }
    }

    /// This lock's queue in the table.
    fn queue(&self) -> &'static Queue {
        let a = self as *const IoLock as usize;
        &TABLE[(a >> 2) % QUEUES]
    }

    /// Takes the lock, waiting at most until the monotonic `deadline` (ns)
    /// and not past `pd`'s close. An uncontended lock is one CAS.
    #[inline]
    pub(crate) fn lock(
        &self,
        deadline: Option<i64>,
        pd: &PollDesc,
    ) -> Result<IoLockGuard<'_>, Stop> {
        // Acquire: pairs with the Release of the previous unlock.
        if self
            .state
            .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(IoLockGuard(self));
        }
        self.lock_slow(deadline, pd)
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self, deadline: Option<i64>, pd: &PollDesc) -> Result<IoLockGuard<'_>, Stop> {
        if deadline.is_some_and(|d| d <= crate::os::nanotime()) {
            return Err(Stop::TimedOut);
        }
        let q = self.queue();
        let gp = park::parkable_g();
        let thread_gen = AtomicU64::new(2);
        let parker = Parker::new();
        // Published to wakers by `qlock`, and to the timer by the heap lock
        // it is added under (after this, on this thread).
        let (gen, seq) = crate::select::begin_wait(gp, &thread_gen);
        let mut w = Waiter {
            g: gp,
            parker: &parker,
            gen,
            seq,
            lock: self,
            next: ptr::null_mut(),
            outcome: WAITING,
        };
        let wp: *mut Waiter = &mut w;
        q.lock();
        loop {
            // Under qlock: `close_waiters` runs after `closing` is set and
            // takes qlock, so it either finds us queued or we see it here.
            if pd.is_closing() {
                q.unlock();
                return Err(Stop::Closed);
            }
            // Relaxed: a guess; the CASes decide.
            match self.state.load(Ordering::Relaxed) {
                0 => {
                    // Acquire: as the fast path.
                    if self
                        .state
                        .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        q.unlock();
                        return Ok(IoLockGuard(self));
                    }
                }
                HELD => {
                    // Relaxed: no data published; the owner's unlock
                    // then fails its fast CAS and takes qlock.
                    if self
                        .state
                        .compare_exchange(HELD, HELD | QUEUED, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                _ => break, // HELD | QUEUED: stable under qlock
            }
        }
        // SAFETY: under qlock; `w` stays at its address until it is
        // unlinked, which happens under qlock before we return.
        unsafe { q.enqueue(wp) };
        if !gp.is_null() {
            let args = ParkArgs {
                queue: q,
                deadline,
                seq,
            };
            park::gopark(
                Some(park_commit),
                &args as *const ParkArgs as *mut u8,
                crate::waitreason::WaitReason::IoWait,
            );
        } else {
            q.unlock();
            match deadline {
                Some(d) => {
                    if !parker.park_deadline(d) && !gen_claim(gen, seq) {
                        // A waker won meanwhile and is about to unpark us.
                        parker.park();
                    }
                }
                None => parker.park(),
            }
        }
        q.lock();
        // SAFETY: under qlock; nobody else touches `w` any more once we
        // hold it (a waker that owns it is done with it before it releases
        // qlock; a timer never touches it).
        let outcome = unsafe { (*wp).outcome };
        if outcome == WAITING {
            // Our deadline won: leave the queue.
            // SAFETY: under qlock; `w` is queued.
            unsafe { q.unlink(wp) };
            self.settle_queued(q);
        }
        q.unlock();
        match outcome {
            GRANTED => Ok(IoLockGuard(self)),
            CLOSED => Err(Stop::Closed),
            _ => Err(Stop::TimedOut),
        }
    }

    /// Clears `QUEUED` if no record waits for this lock. Under `q`'s lock.
    fn settle_queued(&self, q: &Queue) {
        // SAFETY: under qlock (caller's contract).
        if !unsafe { q.has(self) } {
            // Relaxed: while QUEUED is set only qlock holders change the
            // state, and the lock stays held (by its owner, or by the
            // waiter it was just handed to): no data is published.
            let _ = self.state.compare_exchange(
                HELD | QUEUED,
                HELD,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    #[inline]
    fn unlock(&self) {
        // Release: publishes the critical section to the next locker.
        if self
            .state
            .compare_exchange(HELD, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    /// Hands the lock to the first waiter whose wake-up it wins, or frees
    /// it if there is none.
    #[cold]
    #[inline(never)]
    fn unlock_slow(&self) {
        let q = self.queue();
        q.lock();
        let mut next: Option<(*mut G, *const Parker)> = None;
        loop {
            // SAFETY: under qlock.
            let w = unsafe { q.pop(self) };
            if w.is_null() {
                // Release: as the fast unlock (the state is HELD | QUEUED,
                // or HELD if a deadline emptied the queue).
                self.state.store(0, Ordering::Release);
                break;
            }
            // SAFETY: under qlock; just unlinked by us, still live (its
            // waiter waits for qlock before it leaves).
            unsafe {
                if claim(w) {
                    (*w).outcome = GRANTED;
                    next = Some(((*w).g, (*w).parker));
                    self.settle_queued(q);
                    break;
                }
                (*w).outcome = UNLINKED;
            }
        }
        q.unlock();
        if let Some((g, parker)) = next {
            // The new owner's reads are ordered after our critical section
            // by qlock (it takes it before it returns) and by the wake-up.
            wake(g, parker);
        }
    }

    /// Wakes every queued waiter with the closed outcome. Call after `pd`
    /// is marked closing (see "Close" in the module essay).
    pub(crate) fn close_waiters(&self) {
        let q = self.queue();
        q.lock();
        let mut woken: *mut Waiter = ptr::null_mut();
        loop {
            // SAFETY: under qlock.
            let w = unsafe { q.pop(self) };
            if w.is_null() {
                break;
            }
            // SAFETY: under qlock; just unlinked, still live. A claimed
            // record is ours until we wake its waiter, so its `next` can
            // carry our list of them.
            unsafe {
                if claim(w) {
                    (*w).outcome = CLOSED;
                    (*w).next = woken;
                    woken = w;
                } else {
                    (*w).outcome = UNLINKED;
                }
            }
        }
        self.settle_queued(q);
        q.unlock();
        while !woken.is_null() {
            // SAFETY: we own each claimed record until its waiter is woken;
            // read what we need first, it may vanish right after.
            let (next, g, parker) = unsafe { ((*woken).next, (*woken).g, (*woken).parker) };
            wake(g, parker);
            woken = next;
        }
    }
}

/// A thread waiter whose deadline passed claims its own wake-up, unless a
/// waker did (it then unparks the thread).
fn gen_claim(gen: &AtomicU64, seq: u64) -> bool {
    // AcqRel: as a waker's claim.
    gen.compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}
