//! Channels: Go's chan.go, untyped core plus typed `Sender`/`Receiver`.
//!
//! The core (`Hchan`) is Go's hchan: one lock, a ring buffer of `dataqsiz`
//! elements, and wait queues of sudogs for blocked receivers and senders.
//! Elements move by memcpy, as Go's typedmemmove: the source is treated as
//! moved-out afterwards. A sender finding a waiting receiver copies straight
//! into the receiver's slot on its stack and readies it (direct hand-off), and
//! vice versa, so an unbuffered exchange touches the buffer never and the
//! lock once per side.
//!
//! Waiters are goroutines (parked with gopark, readied with goready) or plain
//! OS threads (parked on a `Parker`): the queues do not care which.
//!
//! Close: receivers drain buffered values, then get `RecvError`; blocked and
//! later senders get their value back in `SendError`. Dropping the last
//! Sender closes; dropping the last Receiver closes and drops buffered values.

use crate::park::{self, Parker};
use crate::sudog::{Sudog, WaitQ};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::alloc::Layout;
use std::sync::Arc;
use std::time::Duration;

/// Untyped channel (Go's hchan).
pub(crate) struct Hchan {
    /// Guards `st` and the buffer contents (Go's c.lock). A raw lock so that
    /// gopark's unlock function can release it on g0.
    pub(crate) lock: crate::lock_futex::Mutex,
    st: UnsafeCell<State>,
    /// Elements in the buffer; written under lock, read racily by fast paths.
    /// Relaxed under the lock, which orders it, and in the racy reads that
    /// are hints (`len`, `full`). Except: `recv`'s non-blocking fast path
    /// (as Go's) relies on reading it before `closed`, so `empty` loads it
    /// with Acquire, and the receives that lower it (`recv_locked`,
    /// `take_buffered_locked`) are Release: a fast path that sees the
    /// drain that followed a close then also sees the close (the close
    /// happened before the drain, through the lock), and never reports
    /// WouldBlock for a closed, drained channel. With Relaxed on both
    /// sides it could (aarch64; found by session 27's ordering audit). Go's
    /// loads are sequentially consistent. Free on x86_64.
    qcount: AtomicUsize,
    /// Closed flag; written under lock, read racily by fast paths (Go's
    /// c.closed). Acquire/Release so a racy "closed" also shows the drain:
    /// `close`'s Release store pairs with the Acquire loads in `recv` and
    /// `is_closed`; loads under the lock, and `send`'s fast-path load
    /// (whose order with `full()` does not matter, as Go's chansend
    /// argues), are Relaxed.
    closed: AtomicBool,
    /// Buffer capacity in elements (0 = unbuffered).
    pub(crate) dataqsiz: usize,
    elemsize: usize,
    buf: *mut u8,
    layout: Layout,
    drop_elem: unsafe fn(*mut u8),
    /// Live Sender / Receiver handles. As Arc's count: Relaxed increments
    /// from an existing handle, AcqRel decrements (the last one closes).
    senders: AtomicUsize,
    receivers: AtomicUsize,
}

struct State {
    sendx: usize,
    recvx: usize,
    recvq: WaitQ,
    sendq: WaitQ,
}

// SAFETY: all mutable state is under `lock` or atomic; elements are Send
// (enforced by the typed wrappers).
unsafe impl Send for Hchan {}
// SAFETY: as above.
unsafe impl Sync for Hchan {}

unsafe fn drop_as<T>(p: *mut u8) {
    // SAFETY: the caller passes a valid initialised T.
    unsafe { ptr::drop_in_place(p.cast::<T>()) }
}

/// Largest channel buffer in bytes (Go's maxAlloc on 64-bit Linux,
/// 2^48): a larger `make(chan T, n)` panics "makechan: size out of range".
const MAX_CHAN_BYTES: usize = 1 << 48;

/// Outcome of a non-blocking attempt.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Try {
    Done,
    WouldBlock,
    Closed,
}

impl Hchan {
    /// Panics (Go's makechan does too) if the buffer cannot exist: larger
    /// than [`MAX_CHAN_BYTES`] or refused by the allocator.
    #[track_caller]
    fn new<T>(cap: usize) -> Hchan {
        let layout = match Layout::array::<T>(cap) {
            Ok(l) if l.size() <= MAX_CHAN_BYTES => l,
            _ => panic!(
                "makechan: size out of range ({cap} elements of {} bytes)",
                core::mem::size_of::<T>()
            ),
        };
        let buf = if layout.size() == 0 {
            ptr::NonNull::<T>::dangling().as_ptr().cast()
        } else {
            // SAFETY: non-zero size layout.
            let p = unsafe { std::alloc::alloc(layout) };
            if p.is_null() {
                // Not handle_alloc_error: that aborts, and a bad capacity
                // is the caller's error, which a panic reports.
                panic!(
                    "makechan: size out of range (cannot allocate {} bytes)",
                    layout.size()
                );
            }
            p
        };
        Hchan {
            lock: crate::lock_futex::Mutex::new(),
            st: UnsafeCell::new(State {
                sendx: 0,
                recvx: 0,
                recvq: WaitQ::new(),
                sendq: WaitQ::new(),
            }),
            qcount: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            dataqsiz: cap,
            elemsize: core::mem::size_of::<T>(),
            buf,
            layout,
            drop_elem: drop_as::<T>,
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        }
    }

    /// Takes the channel lock. A runtime critical section (Go's lock()
    /// increments m.locks): a goroutine holding it is never preempted
    /// asynchronously, so a waiter for it never waits on a sleeping M.
    #[inline]
    pub(crate) fn lock(&self) {
        // A detached G takes its P back first, inside the section.
        crate::preempt::acquirem_with_p();
        self.lock.lock();
    }

    /// # Safety
    /// The caller holds the lock, taken on this thread (same M).
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        // SAFETY: guaranteed by the caller.
        unsafe { self.lock.unlock() };
        crate::m::releasem(crate::m::getm());
    }

    /// # Safety
    /// The caller holds the lock; the reference must not outlive it.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn st(&self) -> &mut State {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.st.get() }
    }

    #[inline]
    fn slot(&self, i: usize) -> *mut u8 {
        // i < dataqsiz; ZST: elemsize 0 keeps the dangling pointer.
        self.buf.wrapping_add(i * self.elemsize)
    }

    #[inline]
    fn copy(&self, src: *const u8, dst: *mut u8) {
        // SAFETY: both point to elemsize bytes of T storage owned by the
        // two sides of this transfer, which never overlap.
        unsafe { ptr::copy_nonoverlapping(src, dst, self.elemsize) };
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn len(&self) -> usize {
        self.qcount.load(Ordering::Relaxed)
    }

    /// Go's full(): a send would block (racy; used by fast paths only).
    fn full(&self) -> bool {
        if self.dataqsiz == 0 {
            // SAFETY: racy read of the queue head, as in Go's full();
            // only a hint for the non-blocking fast path.
            return unsafe { (*self.st.get()).recvq.first_racy().is_null() };
        }
        self.qcount.load(Ordering::Relaxed) == self.dataqsiz
    }

    /// Go's empty(): a receive would block (racy hint).
    fn empty(&self) -> bool {
        if self.dataqsiz == 0 {
            // SAFETY: as in `full`.
            return unsafe { (*self.st.get()).sendq.first_racy().is_null() };
        }
        // Acquire: see the field (pairs with the Release of the receives).
        self.qcount.load(Ordering::Acquire) == 0
    }

    /// Locked part of a send: hand off to a waiting receiver or buffer.
    /// The lock stays held; on a hand-off the returned sudog must be readied
    /// (`Sudog::ready`) after unlocking.
    ///
    /// # Safety
    /// The lock is held; `ep` points to an initialised T that is treated as
    /// moved-out when Done is returned.
    pub(crate) unsafe fn send_locked(&self, ep: *const u8) -> (Try, *mut Sudog) {
        // SAFETY: lock held.
        let st = unsafe { self.st() };
        if self.closed.load(Ordering::Relaxed) {
            return (Try::Closed, ptr::null_mut());
        }
        let sg = st.recvq.dequeue();
        if !sg.is_null() {
            // Direct hand-off into the waiting receiver's slot.
            // SAFETY: sg was dequeued by us: its waiter is parked and its
            // fields are ours until it is readied.
            unsafe {
                self.copy(ep, (*sg).elem);
                (*sg).success = true;
            }
            return (Try::Done, sg);
        }
        if self.qcount.load(Ordering::Relaxed) < self.dataqsiz {
            self.copy(ep, self.slot(st.sendx));
            st.sendx += 1;
            if st.sendx == self.dataqsiz {
                st.sendx = 0;
            }
            self.qcount.fetch_add(1, Ordering::Relaxed);
            return (Try::Done, ptr::null_mut());
        }
        (Try::WouldBlock, ptr::null_mut())
    }

    /// Locked part of a receive: take from a waiting sender (through the
    /// buffer if any) or from the buffer. The lock stays held; a returned
    /// sudog must be readied after unlocking.
    ///
    /// # Safety
    /// The lock is held; `ep` points to writable storage for a T, which is
    /// initialised when Done is returned.
    pub(crate) unsafe fn recv_locked(&self, ep: *mut u8) -> (Try, *mut Sudog) {
        // SAFETY: lock held.
        let st = unsafe { self.st() };
        if self.closed.load(Ordering::Relaxed) && self.qcount.load(Ordering::Relaxed) == 0 {
            return (Try::Closed, ptr::null_mut());
        }
        let sg = st.sendq.dequeue();
        if !sg.is_null() {
            // SAFETY: as in send_locked.
            unsafe {
                if self.dataqsiz == 0 {
                    self.copy((*sg).elem, ep);
                } else {
                    // Buffer full: take the head, put the sender's value
                    // at the tail (the same slot, since the ring is full).
                    let s = self.slot(st.recvx);
                    self.copy(s, ep);
                    self.copy((*sg).elem, s);
                    st.recvx += 1;
                    if st.recvx == self.dataqsiz {
                        st.recvx = 0;
                    }
                    st.sendx = st.recvx;
                }
                (*sg).success = true;
            }
            return (Try::Done, sg);
        }
        if self.qcount.load(Ordering::Relaxed) > 0 {
            self.copy(self.slot(st.recvx), ep);
            st.recvx += 1;
            if st.recvx == self.dataqsiz {
                st.recvx = 0;
            }
            // Release: see the field (a fast path that reads this count
            // must also see a close made before it).
            self.qcount.fetch_sub(1, Ordering::Release);
            return (Try::Done, ptr::null_mut());
        }
        (Try::WouldBlock, ptr::null_mut())
    }

    /// Queues `sg` as a blocked sender / receiver.
    ///
    /// # Safety
    /// The lock is held; `sg` stays live until dequeued or removed.
    pub(crate) unsafe fn enqueue(&self, sg: *mut Sudog, is_send: bool) {
        // SAFETY: lock held.
        let st = unsafe { self.st() };
        if is_send {
            st.sendq.enqueue(sg)
        } else {
            st.recvq.enqueue(sg)
        }
    }

    /// Removes `sg` from the send / receive queue if still queued.
    ///
    /// # Safety
    /// The lock is held; `sg` is live.
    pub(crate) unsafe fn dequeue_sudog(&self, sg: *mut Sudog, is_send: bool) {
        // SAFETY: lock held.
        let st = unsafe { self.st() };
        if is_send {
            st.sendq.remove(sg)
        } else {
            st.recvq.remove(sg)
        }
    }

    /// Go's chansend. Blocking: parks the G (or the thread) until the value
    /// is taken or the channel closes. Returns Done or Closed (value still
    /// at `ep`), or WouldBlock when `!block`.
    ///
    /// # Safety
    /// `ep` points to an initialised T, moved-out iff Done is returned.
    pub(crate) unsafe fn send(&self, ep: *const u8, block: bool) -> Try {
        park::preempt_check();
        // Fast path: a non-blocking send on an open full channel fails
        // without the lock (Go's reasoning: closed is read after full; both
        // were true at some moment).
        if !block && !self.closed.load(Ordering::Relaxed) && self.full() {
            return Try::WouldBlock;
        }
        self.lock();
        // SAFETY: lock held; ep per our contract.
        let (r, sg) = unsafe { self.send_locked(ep) };
        if r != Try::WouldBlock || !block {
            // SAFETY: lock held; sg (if any) was dequeued by us.
            unsafe {
                self.unlock();
                if !sg.is_null() {
                    Sudog::ready(sg);
                }
            }
            return r;
        }
        let mut parker = Parker::new();
        let mut sg = Sudog::new_current(&mut parker, ep as *mut u8);
        // SAFETY: lock held; sg lives on this stack until we are woken and
        // no longer queued (the waker dequeues it before readying us).
        unsafe { self.st().sendq.enqueue(&mut sg) };
        // SAFETY: we hold the lock (taken through Hchan::lock, a critical
        // section) and are queued; park releases the lock on g0.
        unsafe { sg.park_unlock(self, crate::waitreason::WaitReason::ChanSend) };
        if sg.success {
            Try::Done
        } else {
            Try::Closed
        }
    }

    /// Go's chanrecv. Returns Done (value written to `ep`), Closed (closed
    /// and drained), or WouldBlock when `!block`.
    ///
    /// # Safety
    /// `ep` points to writable storage for a T.
    pub(crate) unsafe fn recv(&self, ep: *mut u8, block: bool) -> Try {
        park::preempt_check();
        if !block && self.empty() {
            if !self.closed.load(Ordering::Acquire) {
                return Try::WouldBlock;
            }
            // Closed: re-check emptiness; a value buffered before the close
            // must still be delivered.
            if self.empty() {
                return Try::Closed;
            }
        }
        self.lock();
        // SAFETY: lock held; ep per our contract.
        let (r, sg) = unsafe { self.recv_locked(ep) };
        if r != Try::WouldBlock || !block {
            // SAFETY: lock held; sg (if any) was dequeued by us.
            unsafe {
                self.unlock();
                if !sg.is_null() {
                    Sudog::ready(sg);
                }
            }
            return r;
        }
        let mut parker = Parker::new();
        let mut sg = Sudog::new_current(&mut parker, ep);
        // SAFETY: as in send.
        unsafe { self.st().recvq.enqueue(&mut sg) };
        // SAFETY: we hold the lock (taken through Hchan::lock, a critical
        // section) and are queued; park releases the lock on g0.
        unsafe { sg.park_unlock(self, crate::waitreason::WaitReason::ChanReceive) };
        if sg.success {
            Try::Done
        } else {
            Try::Closed
        }
    }

    /// Go's closechan (idempotent): wake every waiter with success = false.
    /// With `drop_buffered` (last Receiver gone), also drops buffered values.
    pub(crate) fn close(&self, drop_buffered: bool) {
        self.lock();
        // SAFETY: lock held.
        let st = unsafe { self.st() };
        let was_closed = self.closed.load(Ordering::Relaxed);
        self.closed.store(true, Ordering::Release);
        let mut wake: Vec<*mut Sudog> = Vec::new();
        if !was_closed {
            loop {
                let sg = st.recvq.dequeue();
                if sg.is_null() {
                    break;
                }
                // SAFETY: dequeued by us.
                unsafe { (*sg).success = false };
                wake.push(sg);
            }
            loop {
                let sg = st.sendq.dequeue();
                if sg.is_null() {
                    break;
                }
                // SAFETY: dequeued by us.
                unsafe { (*sg).success = false };
                wake.push(sg);
            }
        }
        // The last Receiver is gone: the buffered values are dropped where
        // they lie, after the unlock. Nothing touches those slots again: no
        // receive can start (no Receiver), and the channel is closed, so
        // every send fails (under this lock) without writing the ring. The
        // first slot and the count are taken here; qcount 0 keeps
        // `Hchan::drop` from dropping them again. Copying them out instead
        // (as `clear_buffer` must, the channel living on) needed a second
        // buffer as large as the values, allocated under the lock.
        let (first, n) = if drop_buffered {
            // Release: as the receive's decrement (see the field).
            let n = self.qcount.swap(0, Ordering::Release);
            let first = st.recvx;
            st.recvx = (first + n) % self.dataqsiz.max(1);
            st.sendx = st.recvx;
            (first, n)
        } else {
            (0, 0)
        };
        // SAFETY: lock held.
        unsafe { self.unlock() };
        for sg in wake {
            // SAFETY: each was dequeued by us.
            unsafe { Sudog::ready(sg) };
        }
        let (buf, size, cap) = (self.buf, self.elemsize, self.dataqsiz.max(1));
        // SAFETY: the n slots from `first` held initialised values when
        // qcount was taken to 0 above, and are ours alone (see above):
        // each is dropped once, here.
        unsafe {
            drop_elems(self.drop_elem, n, |i| {
                buf.wrapping_add((first + i) % cap * size)
            })
        };
    }

    /// Drops every buffered value without closing the channel (a timer's
    /// stop/reset, Go 1.23: no stale value is received afterwards).
    /// Returns how many were dropped.
    pub(crate) fn clear_buffer(&self) -> usize {
        self.lock();
        // SAFETY: lock held.
        let drained = unsafe { self.take_buffered_locked() };
        // SAFETY: lock held.
        unsafe { self.unlock() };
        let n = drained.n;
        self.drop_drained(drained);
        n
    }

    /// Whether any Receiver handle is still alive. Acquire pairs with the
    /// AcqRel decrement in `Receiver::drop`; a racy answer is only used to
    /// drop timers nobody can observe (the last Receiver never comes back).
    pub(crate) fn has_receivers(&self) -> bool {
        self.receivers.load(Ordering::Acquire) != 0
    }

    /// Moves the buffered values out of the ring (to be dropped after the
    /// lock is released: a destructor may use channels).
    ///
    /// # Safety
    /// The lock is held.
    unsafe fn take_buffered_locked(&self) -> Drained {
        // SAFETY: lock held (caller).
        let st = unsafe { self.st() };
        // Release: as the receive's decrement (see the field).
        let n = self.qcount.swap(0, Ordering::Release);
        if n == 0 {
            return Drained::default();
        }
        let align = self.layout.align().max(1);
        let mut bytes = vec![0u8; n * self.elemsize + align];
        let base = bytes.as_mut_ptr();
        let off = base.align_offset(align);
        for i in 0..n {
            self.copy(
                self.slot(st.recvx),
                base.wrapping_add(off + i * self.elemsize),
            );
            st.recvx = (st.recvx + 1) % self.dataqsiz.max(1);
        }
        st.sendx = st.recvx;
        Drained { bytes, off, n }
    }

    /// Drops values moved out by `take_buffered_locked` (lock not held).
    fn drop_drained(&self, mut d: Drained) {
        let base = d.bytes.as_mut_ptr().wrapping_add(d.off);
        let (buf, size) = (self.buf, self.elemsize);
        // SAFETY: each of the d.n slots holds a moved-out T (ZSTs: the
        // dangling buf is fine), dropped once.
        unsafe {
            drop_elems(self.drop_elem, d.n, |i| {
                if size == 0 {
                    buf
                } else {
                    base.wrapping_add(i * size)
                }
            })
        };
    }
}

/// Drops `n` values, the `i`th at `at(i)`, as a slice drops its elements:
/// a destructor that panics does not leak the rest (they are dropped while
/// the panic unwinds; a second panic then aborts, as in std).
///
/// # Safety
/// Each `at(i)` for `i < n` holds an initialised value of the type
/// `drop_elem` drops, not dropped elsewhere.
unsafe fn drop_elems(drop_elem: unsafe fn(*mut u8), n: usize, at: impl Fn(usize) -> *mut u8) {
    struct Rest<F: Fn(usize) -> *mut u8> {
        i: usize,
        n: usize,
        drop_elem: unsafe fn(*mut u8),
        at: F,
    }
    impl<F: Fn(usize) -> *mut u8> Drop for Rest<F> {
        fn drop(&mut self) {
            // Runs only if a destructor below panicked (else i == n).
            while self.i < self.n {
                let p = (self.at)(self.i);
                self.i += 1;
                // SAFETY: as for `drop_elems`; `i` moved past it first.
                unsafe { (self.drop_elem)(p) };
            }
        }
    }
    let mut rest = Rest {
        i: 0,
        n,
        drop_elem,
        at,
    };
    while rest.i < rest.n {
        let p = (rest.at)(rest.i);
        rest.i += 1;
        // SAFETY: the caller's contract; `i` moved past it first, so an
        // unwind from here does not drop it again.
        unsafe { drop_elem(p) };
    }
}

/// Values moved out of a channel's buffer, awaiting their destructors.
#[derive(Default)]
struct Drained {
    bytes: Vec<u8>,
    off: usize,
    n: usize,
}

impl Drop for Hchan {
    fn drop(&mut self) {
        /// Frees the buffer, also if an element's destructor panics.
        struct Free(*mut u8, std::alloc::Layout);
        impl Drop for Free {
            fn drop(&mut self) {
                if self.1.size() != 0 {
                    // SAFETY: allocated in Hchan::new with this layout.
                    unsafe { std::alloc::dealloc(self.0, self.1) };
                }
            }
        }
        let _free = Free(self.buf, self.layout);
        let recvx = self.st.get_mut().recvx;
        let n = *self.qcount.get_mut();
        let (buf, size, cap) = (self.buf, self.elemsize, self.dataqsiz.max(1));
        // SAFETY: the n buffered elements from recvx on are initialised
        // and dropped once, here.
        unsafe {
            drop_elems(self.drop_elem, n, |i| {
                buf.wrapping_add((recvx + i) % cap * size)
            })
        };
    }
}

// ---------------------------------------------------------------------------
// Typed front-end.

/// Creates a channel of `T` with `cap` buffer slots (0 = unbuffered
/// rendezvous). Go's `make(chan T, cap)`. Multi-producer, multi-consumer.
///
/// Panics with "makechan: size out of range" (as Go's make does) if the
/// buffer, `cap * size_of::<T>()` bytes, cannot exist: larger than 2^48
/// bytes, or refused by the allocator. The panic unwinds (it can be caught
/// with `catch_unwind`); it never aborts.
#[track_caller]
pub fn chan<T: Send>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let c = Arc::new(Hchan::new::<T>(cap));
    (
        Sender {
            c: c.clone(),
            _t: PhantomData,
        },
        Receiver { c, _t: PhantomData },
    )
}

/// A channel with a Receiver and no Sender handle: its sender count stays
/// at one for ever, so it is never closed by senders. The runtime sends on
/// it through the returned core (timer channels), or nobody does
/// ([`never`]). Freed when the receivers and the core are gone.
pub(crate) fn senderless<T>(cap: usize) -> (Arc<Hchan>, Receiver<T>) {
    let c = Arc::new(Hchan::new::<T>(cap));
    (c.clone(), Receiver { c, _t: PhantomData })
}

/// A Receiver that never receives anything and is never closed: a
/// disabled `select!` case (crossbeam-channel's `never()`; Go's nil
/// channel in a select). `recv` on it blocks for ever.
pub fn never<T>() -> Receiver<T> {
    senderless(0).1
}

/// The sending half of a channel. Cloneable; the channel closes when the
/// last Sender is dropped.
pub struct Sender<T> {
    pub(crate) c: Arc<Hchan>,
    _t: PhantomData<fn(T)>,
}

/// The receiving half of a channel. Cloneable (MPMC); when the last
/// Receiver is dropped, buffered values are dropped and sends fail.
pub struct Receiver<T> {
    pub(crate) c: Arc<Hchan>,
    _t: PhantomData<fn() -> T>,
}

// SAFETY: the handles only move Ts between threads (T: Send is required to
// create the channel); the core is Sync.
unsafe impl<T: Send> Send for Sender<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Sender<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Receiver<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Receiver<T> {}

// A panic cannot leave a channel half-updated: every state change happens
// under the channel lock in code that does not panic, and user values are
// dropped outside it. So the handles are unwind-safe (as crossbeam's are),
// and `catch_unwind(|| tx.send(1))` compiles.
impl<T> std::panic::UnwindSafe for Sender<T> {}
impl<T> std::panic::RefUnwindSafe for Sender<T> {}
impl<T> std::panic::UnwindSafe for Receiver<T> {}
impl<T> std::panic::RefUnwindSafe for Receiver<T> {}

/// `send` on a closed channel: the value comes back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// `try_send` failure: the value comes back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The buffer is full (or, unbuffered, no receiver is waiting).
    Full(T),
    /// The channel is closed.
    Closed(T),
}

/// `send_timeout` failure: the value comes back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// Not sent within the timeout.
    Timeout(T),
    /// The channel is closed.
    Closed(T),
}

/// `recv` on a closed, drained channel.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct RecvError;

/// `try_recv` failure.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum TryRecvError {
    /// Nothing buffered and no sender waiting.
    Empty,
    /// Closed and drained.
    Closed,
}

/// `recv_timeout` failure.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum RecvTimeoutError {
    /// Nothing received within the timeout.
    Timeout,
    /// Closed and drained.
    Closed,
}

macro_rules! impl_err {
    ($name:ident, $msg:expr) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($msg)
            }
        }
        impl std::error::Error for $name {}
    };
}
impl_err!(RecvError, "receiving on a closed channel");
impl std::fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "receiving on an empty channel",
            TryRecvError::Closed => "receiving on a closed channel",
        })
    }
}
impl std::error::Error for TryRecvError {}
impl std::fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecvTimeoutError::Timeout => "timed out waiting on a channel",
            RecvTimeoutError::Closed => "receiving on a closed channel",
        })
    }
}
impl std::error::Error for RecvTimeoutError {}
impl<T> std::fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendError(..)")
    }
}
impl<T> std::fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sending on a closed channel")
    }
}
impl<T> std::error::Error for SendError<T> {}
impl<T> std::fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "Full(..)",
            TrySendError::Closed(_) => "Closed(..)",
        })
    }
}
impl<T> std::fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "sending on a full channel",
            TrySendError::Closed(_) => "sending on a closed channel",
        })
    }
}
impl<T> std::error::Error for TrySendError<T> {}
impl<T> std::fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendTimeoutError::Timeout(_) => "Timeout(..)",
            SendTimeoutError::Closed(_) => "Closed(..)",
        })
    }
}
impl<T> std::fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendTimeoutError::Timeout(_) => "timed out sending on a channel",
            SendTimeoutError::Closed(_) => "sending on a closed channel",
        })
    }
}
impl<T> std::error::Error for SendTimeoutError<T> {}

impl<T> SendError<T> {
    /// The value that was not sent (Go's send panics instead; no
    /// counterpart). Never blocks.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> From<SendError<T>> for TrySendError<T> {
    /// A send that failed because the channel is closed (crossbeam's
    /// `Disconnected`).
    fn from(e: SendError<T>) -> Self {
        TrySendError::Closed(e.0)
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    /// A send that failed because the channel is closed.
    fn from(e: SendError<T>) -> Self {
        SendTimeoutError::Closed(e.0)
    }
}

impl From<RecvError> for TryRecvError {
    /// A receive that failed because the channel is closed and drained.
    fn from(_: RecvError) -> Self {
        TryRecvError::Closed
    }
}

impl From<RecvError> for RecvTimeoutError {
    /// A receive that failed because the channel is closed and drained.
    fn from(_: RecvError) -> Self {
        RecvTimeoutError::Closed
    }
}

impl TryRecvError {
    /// Whether nothing was available (`Empty`): Go's `default` case of a
    /// receive select. Never blocks.
    pub fn is_empty(&self) -> bool {
        matches!(self, TryRecvError::Empty)
    }
    /// Whether the channel is closed and drained (`Closed`): Go's
    /// `ok == false`. Never blocks.
    pub fn is_closed(&self) -> bool {
        matches!(self, TryRecvError::Closed)
    }
}

impl RecvTimeoutError {
    /// Whether the timeout passed (`Timeout`): Go's `time.After` case won.
    /// Never blocks.
    pub fn is_timeout(&self) -> bool {
        matches!(self, RecvTimeoutError::Timeout)
    }
    /// Whether the channel is closed and drained (`Closed`): Go's
    /// `ok == false`. Never blocks.
    pub fn is_closed(&self) -> bool {
        matches!(self, RecvTimeoutError::Closed)
    }
}

impl<T> TrySendError<T> {
    /// Whether the buffer was full (`Full`): Go's `default` case of a send
    /// select. Never blocks.
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }
    /// Whether the channel is closed (`Closed`; Go's send would panic).
    /// Never blocks.
    pub fn is_closed(&self) -> bool {
        matches!(self, TrySendError::Closed(_))
    }
}

impl<T> SendTimeoutError<T> {
    /// Whether the timeout passed (`Timeout`): Go's `time.After` case won.
    /// Never blocks.
    pub fn is_timeout(&self) -> bool {
        matches!(self, SendTimeoutError::Timeout(_))
    }
    /// Whether the channel is closed (`Closed`; Go's send would panic).
    /// Never blocks.
    pub fn is_closed(&self) -> bool {
        matches!(self, SendTimeoutError::Closed(_))
    }
}

impl<T> TrySendError<T> {
    /// The value that was not sent, `Full` or `Closed`. No Go counterpart.
    /// Never blocks.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Closed(v) => v,
        }
    }
}

impl<T> SendTimeoutError<T> {
    /// The value that was not sent, `Timeout` or `Closed`. No Go
    /// counterpart. Never blocks.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Closed(v) => v,
        }
    }
}

impl<T> Sender<T> {
    /// Sends `v`, parking the goroutine (or blocking the OS thread) until a
    /// receiver takes it or buffer space frees. Go's `ch <- v`.
    ///
    /// Errors: `Err(SendError(v))` if the channel is closed (by `close`, or
    /// because every Receiver was dropped), including while blocked.
    pub fn send(&self, v: T) -> Result<(), SendError<T>> {
        let slot = MaybeUninit::new(v);
        // SAFETY: slot holds an initialised T, moved-out iff Done.
        match unsafe { self.c.send(slot.as_ptr().cast(), true) } {
            Try::Done => Ok(()),
            // SAFETY: not Done: the value is still ours.
            _ => Err(SendError(unsafe { slot.assume_init_read() })),
        }
    }

    /// Sends without blocking: `Full(v)` if the buffer is full (unbuffered:
    /// no receiver is waiting), `Closed(v)` if closed. Go's
    /// select-with-default send. Never parks, but is a preemption check
    /// point: a goroutine past its time slice yields here first.
    pub fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        let mut slot = MaybeUninit::new(v);
        // SAFETY: as in send.
        match unsafe { self.c.send(slot.as_mut_ptr().cast(), false) } {
            Try::Done => Ok(()),
            // SAFETY: not Done: the value is still ours.
            Try::WouldBlock => Err(TrySendError::Full(unsafe { slot.assume_init_read() })),
            // SAFETY: as above.
            Try::Closed => Err(TrySendError::Closed(unsafe { slot.assume_init_read() })),
        }
    }

    /// Like `send`, giving up after `d` (`Timeout(v)`), or `Closed(v)`.
    /// Parks the goroutine (blocks the thread) for at most `d`
    /// (`Duration::MAX`: forever) on the monotonic clock; the timeout
    /// typically fires 50-100 µs late (Linux's timer slack). Go's `select`
    /// with a `time.After(d)` case.
    pub fn send_timeout(&self, v: T, d: Duration) -> Result<(), SendTimeoutError<T>> {
        let mut slot = MaybeUninit::new(v);
        let cases = &mut [crate::select::Scase::send(
            &self.c,
            slot.as_mut_ptr().cast(),
        )];
        match crate::select::selectgo(cases, true, crate::time::timeout_deadline(d)) {
            crate::select::Selected::Case(_, true) => Ok(()),
            // SAFETY: not sent: the value is still ours.
            crate::select::Selected::Case(_, false) => {
                Err(SendTimeoutError::Closed(unsafe { slot.assume_init_read() }))
            }
            // SAFETY: as above.
            _ => Err(SendTimeoutError::Timeout(unsafe {
                slot.assume_init_read()
            })),
        }
    }

    /// Go's `close(ch)`. Idempotent (a second close is a no-op, where Go
    /// panics). Receivers drain buffered values, then get `RecvError`;
    /// blocked senders get their values back. Never blocks.
    pub fn close(&self) {
        self.c.close(false);
    }

    /// Values buffered now (a racy snapshot): Go's `len(ch)`. Never blocks.
    pub fn len(&self) -> usize {
        self.c.len()
    }
    /// Whether nothing is buffered now (a racy snapshot): Go's
    /// `len(ch) == 0`. Never blocks.
    pub fn is_empty(&self) -> bool {
        self.c.len() == 0
    }
    /// Buffer capacity in values (0 = unbuffered): Go's `cap(ch)`. Never
    /// blocks.
    pub fn capacity(&self) -> usize {
        self.c.dataqsiz
    }
    /// Whether the buffer is full now (a racy snapshot; crossbeam's
    /// `is_full`). Always true for an unbuffered channel, whose buffer has
    /// no room (a send may still succeed by hand-off to a waiting receiver).
    /// Go's `len(ch) == cap(ch)`. Never blocks.
    pub fn is_full(&self) -> bool {
        self.c.len() == self.c.dataqsiz
    }
    /// Whether the channel is closed (a racy snapshot; values may still be
    /// buffered). Go has no such query. Never blocks.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }
    /// Whether `self` and `other` send on the same channel (one is a clone
    /// of the other, or both of one original), as crossbeam's
    /// `same_channel`; Go compares channel values with `==`. Never blocks.
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        Arc::ptr_eq(&self.c, &other.c)
    }
}

impl<T> Receiver<T> {
    /// Receives a value, parking the goroutine (or blocking the thread)
    /// until one is available. Go's `v, ok := <-ch`: `Err(RecvError)` once
    /// the channel is closed and drained.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut slot = MaybeUninit::<T>::uninit();
        // SAFETY: slot is storage for a T, initialised iff Done.
        match unsafe { self.c.recv(slot.as_mut_ptr().cast(), true) } {
            // SAFETY: Done: initialised.
            Try::Done => Ok(unsafe { slot.assume_init() }),
            _ => Err(RecvError),
        }
    }

    /// Receives without blocking: `Empty` or `Closed` (closed and drained).
    /// Go's select-with-default receive. Never parks, but is a preemption
    /// check point: a goroutine past its time slice yields here first.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut slot = MaybeUninit::<T>::uninit();
        // SAFETY: as in recv.
        match unsafe { self.c.recv(slot.as_mut_ptr().cast(), false) } {
            // SAFETY: Done: initialised.
            Try::Done => Ok(unsafe { slot.assume_init() }),
            Try::WouldBlock => Err(TryRecvError::Empty),
            Try::Closed => Err(TryRecvError::Closed),
        }
    }

    /// Like `recv`, giving up after `d` with `Timeout`; `Closed` once the
    /// channel is closed and drained. Parks the goroutine (blocks the
    /// thread) for at most `d` (`Duration::MAX`: forever) on the monotonic
    /// clock; the timeout typically fires 50-100 µs late (Linux's timer
    /// slack). Go's `select` with a `time.After(d)` case.
    pub fn recv_timeout(&self, d: Duration) -> Result<T, RecvTimeoutError> {
        let mut slot = MaybeUninit::<T>::uninit();
        let cases = &mut [crate::select::Scase::recv(
            &self.c,
            slot.as_mut_ptr().cast(),
        )];
        match crate::select::selectgo(cases, true, crate::time::timeout_deadline(d)) {
            // SAFETY: received: initialised.
            crate::select::Selected::Case(_, true) => Ok(unsafe { slot.assume_init() }),
            crate::select::Selected::Case(_, false) => Err(RecvTimeoutError::Closed),
            _ => Err(RecvTimeoutError::Timeout),
        }
    }

    /// Iterates until the channel is closed and drained (Go's
    /// `for v := range ch`). Each `next` is a [`recv`](Receiver::recv): it
    /// parks the goroutine (blocks a plain thread) until a value arrives.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// Iterates over the values available now without blocking: ends at
    /// the first `try_recv` that fails (empty, or closed and drained), as
    /// crossbeam's `try_iter`. Never parks (each `next` is a `try_recv`).
    /// No Go counterpart (a loop over a select with `default`).
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// Values buffered now (a racy snapshot): Go's `len(ch)`. Never blocks.
    pub fn len(&self) -> usize {
        self.c.len()
    }
    /// Whether nothing is buffered now (a racy snapshot): Go's
    /// `len(ch) == 0`. Never blocks.
    pub fn is_empty(&self) -> bool {
        self.c.len() == 0
    }
    /// Buffer capacity in values (0 = unbuffered): Go's `cap(ch)`. Never
    /// blocks.
    pub fn capacity(&self) -> usize {
        self.c.dataqsiz
    }
    /// Whether the buffer is full now (a racy snapshot; crossbeam's
    /// `is_full`). Always true for an unbuffered channel, whose buffer has
    /// no room (a send may still succeed by hand-off to a waiting receiver).
    /// Go's `len(ch) == cap(ch)`. Never blocks.
    pub fn is_full(&self) -> bool {
        self.c.len() == self.c.dataqsiz
    }
    /// Whether the channel is closed (a racy snapshot; values may still be
    /// buffered). Go has no such query. Never blocks.
    pub fn is_closed(&self) -> bool {
        self.c.is_closed()
    }
}

/// Blocking iterator over received values; ends when closed and drained.
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> std::fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter").field("rx", self.rx).finish()
    }
}

/// Non-blocking iterator over the values available now (see
/// [`Receiver::try_iter`]).
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

impl<T> std::fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TryIter").field("rx", self.rx).finish()
    }
}

/// Owning iterator (`for v in rx`).
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> std::fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntoIter").field("rx", &self.rx).finish()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        // Relaxed: a new handle from an existing one (as Arc's clone).
        self.c.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            c: self.c.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        // Relaxed: as above.
        self.c.receivers.fetch_add(1, Ordering::Relaxed);
        Receiver {
            c: self.c.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // AcqRel: the last dropper sees every other handle's operations.
        if self.c.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.c.close(false);
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // AcqRel: as above.
        if self.c.receivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.c.close(true);
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("len", &self.len())
            .field("cap", &self.capacity())
            .finish()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("len", &self.len())
            .field("cap", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// Records where it is dropped.
    struct Spot(Arc<Mutex<Vec<usize>>>);

    impl Drop for Spot {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(self as *const Spot as usize);
        }
    }

    /// Dropping the last Receiver drops the buffered values in the ring,
    /// across its wrap-around, each once, and copies none of them out
    /// (before: every value was moved into a second buffer as large as the
    /// values, allocated under the channel lock).
    #[test]
    fn last_receiver_drops_buffered_values_in_place() {
        let spots = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = super::chan::<Spot>(4);
        // Wrap the ring: receive two, so the four live values sit in slots
        // 2, 3, 0 and 1.
        for _ in 0..2 {
            tx.send(Spot(spots.clone())).ok().unwrap();
        }
        drop(rx.recv().unwrap());
        drop(rx.recv().unwrap());
        spots.lock().unwrap().clear();
        for _ in 0..4 {
            tx.send(Spot(spots.clone())).ok().unwrap();
        }
        let (lo, hi) = (rx.c.buf as usize, rx.c.buf as usize + 4 * size_of::<Spot>());
        drop(rx);
        let mut at = spots.lock().unwrap().clone();
        assert_eq!(at.len(), 4, "each buffered value dropped once");
        assert!(
            at.iter().all(|&a| (lo..hi).contains(&a)),
            "dropped at {at:x?}, outside the ring {lo:#x}..{hi:#x}"
        );
        at.sort();
        at.dedup();
        assert_eq!(at.len(), 4, "four distinct slots");
        // A send after the last Receiver is gone fails and returns its value.
        let back = tx.send(Spot(spots.clone())).unwrap_err();
        drop(back);
        assert_eq!(spots.lock().unwrap().len(), 5);
    }
}
