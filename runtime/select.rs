//! `select!`: Go's selectgo (select.go) over the untyped channel core.
//!
//! Three passes, as in Go: (1) with every involved channel locked (in
//! address order, each once), look for a case that can proceed, visiting
//! cases in a random order (uniform choice among ready cases); (2) if none
//! and the select blocks, queue a sudog on every channel (in lock order,
//! which is itself random with respect to case order), and park; (3) when
//! woken, lock again and dequeue the losing sudogs. Exactly one waker wins
//! the waiter's generation CAS (see `G::selgen`), so one case completes.
//!
//! Timeouts (`recv_timeout`, `send_timeout`) are a select with a deadline:
//! a goroutine parks with a timer that competes for the same CAS; a thread
//! parks with a futex timeout and then competes for it itself.

use crate::chan::{Hchan, Receiver, RecvError, SendError, Sender, Try};
use crate::g::G;
use crate::park::{self, Parker};
use crate::sudog::Sudog;
use core::mem::MaybeUninit;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One case of a select (Go's scase).
#[derive(Debug)]
pub struct Scase {
    c: *const Hchan,
    elem: *mut u8,
    is_send: bool,
}

impl Scase {
    pub(crate) fn send(c: &Arc<Hchan>, elem: *mut u8) -> Scase {
        Scase {
            c: Arc::as_ptr(c),
            elem,
            is_send: true,
        }
    }
    pub(crate) fn recv(c: &Arc<Hchan>, elem: *mut u8) -> Scase {
        Scase {
            c: Arc::as_ptr(c),
            elem,
            is_send: false,
        }
    }
    fn chan(&self) -> &Hchan {
        // SAFETY: the typed slot that built this case borrows the channel
        // handle for the whole select.
        unsafe { &*self.c }
    }
}

/// Result of [`selectgo`].
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Selected {
    /// Case index; `true` if the operation happened, `false` if the
    /// channel was closed.
    Case(usize, bool),
    /// Nothing was ready and the select had a default.
    Default,
    /// The deadline passed first.
    Timeout,
}

/// Ends a `select!` slot before the chosen body runs (`__select_dispatch`):
/// drops a send case's unsent value and ends the borrow of its channel. A
/// function rather than `drop`, which clippy flags in user code for
/// `RecvSlot` (no destructor). Not public API.
#[doc(hidden)]
#[inline(always)]
pub fn __slot_done<S>(_slot: S) {}

/// Starts a wait that several wakers may race to end (G::selgen's
/// protocol, shared by select and net/iolock.rs): the running goroutine
/// `gp`'s generation word moves to the next even value `2*seq`, or, on a
/// plain thread (`gp` null), the caller's own `thread_gen` (which must
/// read 2) serves with `seq` 1. A waker owns the wake-up if it CASes
/// `2*seq` to `2*seq + 1`; a timer queued with `seq` loses to a later
/// wait. The store is Relaxed: the caller publishes it to wakers through
/// the lock it holds when it queues itself, and to a timeout through the
/// heap lock the timer is added under.
pub(crate) fn begin_wait(gp: *mut G, thread_gen: &AtomicU64) -> (&AtomicU64, u64) {
    if gp.is_null() {
        return (thread_gen, 1);
    }
    // SAFETY: gp is the running G (never freed): only it starts a wait on
    // its own generation.
    let g = unsafe { &*gp };
    let seq = g.selgen.load(Ordering::Relaxed) / 2 + 1;
    g.selgen.store(2 * seq, Ordering::Relaxed);
    (&g.selgen, seq)
}

/// Locks the channels of `cases` in `lockorder`, each once.
fn sellock(cases: &[Scase], lockorder: &[usize]) {
    let mut last: *const Hchan = ptr::null();
    for &i in lockorder {
        let c = cases[i].c;
        if c != last {
            cases[i].chan().lock();
            last = c;
        }
    }
}

/// Unlocks in reverse lock order, each channel once.
fn selunlock(cases: &[Scase], lockorder: &[usize]) {
    let mut j = lockorder.len();
    while j > 0 {
        j -= 1;
        let c = cases[lockorder[j]].c;
        if j > 0 && cases[lockorder[j - 1]].c == c {
            continue; // the earlier duplicate unlocks it
        }
        // SAFETY: sellock locked each distinct channel exactly once.
        unsafe { cases[lockorder[j]].chan().unlock() };
    }
}

struct ParkArgs<'a> {
    cases: &'a [Scase],
    lockorder: &'a [usize],
    deadline: Option<i64>,
    seq: u64,
}

/// gopark unlock function for a parked select (Go's selparkcommit): unlock
/// every channel, then arm the deadline timer (only now that the G is
/// Waiting may a timer ready it).
fn selparkcommit(gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg points to ParkArgs on the parked G's stack, which stays
    // valid while it is parked; we are on g0 of the same M.
    let a = unsafe { &*(arg as *const ParkArgs<'_>) };
    let (deadline, seq) = (a.deadline, a.seq);
    selunlock(a.cases, a.lockorder);
    // From here on `a` may be gone (the G may already be readied and running).
    if let Some(when) = deadline {
        crate::time::add_timer(when, crate::timer::Action::SelTimeout { gp, seq });
    }
    true
}

/// A one-case select: the channel operation itself, as Go's compiler
/// emits for one (chansend1/chanrecv1, or with a default
/// selectnbsend/selectnbrecv). Without a default this only saves work;
/// with one it keeps the lock-free early exits of a non-blocking send on a
/// full channel and receive on an empty one. A publisher offering each
/// message to 200 subscribers with `select! { send(tx, m) -> _ => {},
/// default => {} }` at GOMAXPROCS=2 spent most of its time taking (and
/// sleeping on) the subscribers' channel locks: 4.5x Go's time, against
/// 0.7x with try_send (docs/BENCHMARKS.md, session 23). Inline, so that
/// `select!` costs what `try_send` does.
#[inline]
fn select_one(cs: &Scase, block: bool) -> Selected {
    let c = cs.chan();
    // SAFETY: elem is this case's typed slot (initialised for a send,
    // writable for a receive), as in selectgo's pass 1; Hchan::send leaves
    // the value in place unless it reports Done.
    let r = unsafe {
        if cs.is_send {
            c.send(cs.elem, block)
        } else {
            c.recv(cs.elem, block)
        }
    };
    match r {
        Try::Done => Selected::Case(0, true),
        Try::Closed => Selected::Case(0, false),
        Try::WouldBlock => Selected::Default,
    }
}

/// Go's selectgo. Blocks (parking the G or the thread) unless `!block`;
/// with a `deadline` (monotonic ns) gives up at that time.
pub fn selectgo(cases: &mut [Scase], block: bool, deadline: Option<i64>) -> Selected {
    let n = cases.len();
    if n == 1 && deadline.is_none() {
        return select_one(&cases[0], block);
    }
    park::preempt_check();
    // Poll order: a uniform random permutation (Fisher–Yates).
    let mut order_buf = [0usize; 32];
    let mut order_vec = Vec::new();
    let (pollorder, lockorder): (&mut [usize], &mut [usize]) = if n <= 16 {
        let (a, b) = order_buf.split_at_mut(16);
        (&mut a[..n], &mut b[..n])
    } else {
        order_vec.resize(2 * n, 0);
        let (a, b) = order_vec.split_at_mut(n);
        (a, b)
    };
    for i in 0..n {
        let j = (crate::m::fastrand() as usize) % (i + 1);
        pollorder[i] = pollorder[j];
        pollorder[j] = i;
    }
    // Lock order: by channel address (Go sorts by hchan address too), ties
    // in poll order so the queueing order on one channel is random too.
    if n <= 16 {
        // Unique keys (address above, poll position below) in a stack
        // array, insertion-sorted: `sort_by_key` through `cases` was 14% of
        // a 10-case dispatcher loop's CPU (a helper's h11 `dispatch`).
        let mut keys = [0u128; 16];
        for (pos, &i) in pollorder.iter().enumerate() {
            let k = ((cases[i].c as usize as u128) << 64) | pos as u128;
            let mut j = pos;
            while j > 0 && keys[j - 1] > k {
                keys[j] = keys[j - 1];
                j -= 1;
            }
            keys[j] = k;
        }
        for (slot, k) in lockorder.iter_mut().zip(keys.iter()) {
            *slot = pollorder[*k as u64 as usize];
        }
    } else {
        lockorder.copy_from_slice(pollorder);
        lockorder.sort_by_key(|&i| cases[i].c as usize);
    }

    if n == 0 {
        return if !block {
            Selected::Default
        } else {
            block_forever(deadline)
        };
    }

    sellock(cases, lockorder);

    // Pass 1: find a case that can proceed now.
    for &i in pollorder.iter() {
        let cs = &cases[i];
        let c = cs.chan();
        // SAFETY: c is locked; elem is the typed slot of this case.
        let (r, sg) = unsafe {
            if cs.is_send {
                c.send_locked(cs.elem)
            } else {
                c.recv_locked(cs.elem)
            }
        };
        if r != Try::WouldBlock {
            selunlock(cases, lockorder);
            if !sg.is_null() {
                // SAFETY: dequeued by us in send_locked/recv_locked.
                unsafe { Sudog::ready(sg) };
            }
            return Selected::Case(i, r == Try::Done);
        }
    }
    if !block {
        selunlock(cases, lockorder);
        return Selected::Default;
    }
    if let Some(d) = deadline {
        if d <= crate::os::nanotime() {
            selunlock(cases, lockorder);
            return Selected::Timeout;
        }
    }

    // Pass 2: queue on every channel and park.
    let gp = park::parkable_g();
    let thread_gen = AtomicU64::new(2);
    let mut parker = Parker::new();
    // Published to wakers by the channel locks we hold (begin_wait).
    let (gen, seq) = begin_wait(gp, &thread_gen);
    if !gp.is_null() {
        // SAFETY: gp is the running G (parkable_g). Relaxed: as the
        // generation, published by the channel locks we hold.
        unsafe { (*gp).param.store(0, Ordering::Relaxed) };
    }
    // One sudog per case, on this stack (no allocation up to 8 cases).
    let mut new_sudog = |i: usize| {
        let mut sg = Sudog::new_current(&mut parker, cases[i].elem);
        sg.sel = gen;
        sg.seq = seq;
        sg
    };
    let mut sudog_arr: [MaybeUninit<Sudog>; 8] = [const { MaybeUninit::uninit() }; 8];
    let mut sudog_vec: Vec<Sudog>;
    let sudogs: &mut [Sudog] = if n <= sudog_arr.len() {
        for (i, slot) in sudog_arr.iter_mut().take(n).enumerate() {
            slot.write(new_sudog(i));
        }
        // SAFETY: the first n entries were initialised just above; Sudog
        // has no destructor, so never dropping them is fine.
        unsafe { core::slice::from_raw_parts_mut(sudog_arr.as_mut_ptr().cast::<Sudog>(), n) }
    } else {
        sudog_vec = (0..n).map(new_sudog).collect();
        &mut sudog_vec
    };
    for &i in lockorder.iter() {
        let sg: *mut Sudog = &mut sudogs[i];
        // SAFETY: channel locked; the sudogs stay in place until pass 3.
        unsafe { cases[i].chan().enqueue(sg, cases[i].is_send) };
    }
    let param = if !gp.is_null() {
        let args = ParkArgs {
            cases,
            lockorder,
            deadline,
            seq,
        };
        park::gopark(
            Some(selparkcommit),
            &args as *const ParkArgs<'_> as *mut u8,
            crate::waitreason::WaitReason::Select,
        );
        // SAFETY: gp is us, running again. Relaxed: see G::param.
        unsafe { (*gp).param.swap(0, Ordering::Relaxed) }
    } else {
        selunlock(cases, lockorder);
        match deadline {
            // i64::MAX (an overflowing timeout) never comes: an
            // indefinite park, counted as such by the deadlock check.
            Some(d) if d != i64::MAX => {
                if !parker.park_deadline(d) {
                    // Timed out: claim our own wait, unless a channel did.
                    // AcqRel: as a waker's claim (sudog.rs `dequeue`).
                    if gen
                        .compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                        .is_err()
                    {
                        parker.park(); // the winner is about to unpark us
                    }
                }
            }
            _ => parker.park(),
        }
        // Relaxed: see Parker::param.
        parker.param.load(Ordering::Relaxed)
    };

    // Pass 3: dequeue the losers.
    sellock(cases, lockorder);
    let mut won = None;
    for &i in lockorder.iter() {
        let sg: *mut Sudog = &mut sudogs[i];
        if sg as usize == param {
            won = Some((i, sudogs[i].success));
        } else {
            // SAFETY: channel locked; sg is ours.
            unsafe { cases[i].chan().dequeue_sudog(sg, cases[i].is_send) };
        }
    }
    selunlock(cases, lockorder);
    match won {
        Some((i, ok)) => Selected::Case(i, ok),
        None => Selected::Timeout,
    }
}

/// `select {}` with no cases: block forever (or until the deadline).
fn block_forever(deadline: Option<i64>) -> Selected {
    match deadline {
        Some(d) => {
            let now = crate::os::nanotime();
            if d > now {
                crate::time::sleep(std::time::Duration::from_nanos((d - now) as u64));
            }
            Selected::Timeout
        }
        None => loop {
            if park::in_goroutine() {
                park::gopark(
                    None,
                    ptr::null_mut(),
                    crate::waitreason::WaitReason::SelectNoCases,
                );
            } else {
                Parker::new().park();
            }
        },
    }
}

// ---------------------------------------------------------------------------
// Typed slots used by the `select!` macro (not public API).

/// A `recv(rx) -> res` case's storage.
#[doc(hidden)]
#[derive(Debug)]
pub struct RecvSlot<'a, T> {
    rx: &'a Receiver<T>,
    val: MaybeUninit<T>,
}

impl<'a, T> RecvSlot<'a, T> {
    #[doc(hidden)]
    pub fn new(rx: &'a Receiver<T>) -> Self {
        RecvSlot {
            rx,
            val: MaybeUninit::uninit(),
        }
    }
    #[doc(hidden)]
    pub fn case(&mut self) -> Scase {
        Scase::recv(&self.rx.c, self.val.as_mut_ptr().cast())
    }
    /// The case's result once selected.
    ///
    /// # Safety
    /// Call at most once, only for the case that `__select` chose, with
    /// the `ok` it reported: with `ok == true` the value is read out of the
    /// slot, which is uninitialised unless the receive happened.
    #[doc(hidden)]
    pub unsafe fn finish(&mut self, ok: bool) -> Result<T, RecvError> {
        if ok {
            // SAFETY: a selected recv with ok wrote a T into val.
            Ok(unsafe { self.val.assume_init_read() })
        } else {
            Err(RecvError)
        }
    }
}

/// A `send(tx, v) -> res` case's storage. Drops `v` if not selected.
#[doc(hidden)]
#[derive(Debug)]
pub struct SendSlot<'a, T> {
    tx: &'a Sender<T>,
    val: MaybeUninit<T>,
    live: bool,
}

impl<'a, T> SendSlot<'a, T> {
    #[doc(hidden)]
    pub fn new(tx: &'a Sender<T>, v: T) -> Self {
        SendSlot {
            tx,
            val: MaybeUninit::new(v),
            live: true,
        }
    }
    #[doc(hidden)]
    pub fn case(&mut self) -> Scase {
        Scase::send(&self.tx.c, self.val.as_mut_ptr().cast())
    }
    /// The case's result once selected.
    ///
    /// # Safety
    /// Call only for the case that `__select` chose, with the `ok` it
    /// reported: with `ok == false` the value is read back out of the slot,
    /// which a completed send has moved out.
    #[doc(hidden)]
    pub unsafe fn finish(&mut self, ok: bool) -> Result<(), SendError<T>> {
        self.live = false;
        if ok {
            Ok(())
        } else {
            // SAFETY: not sent: the value is still in val.
            Err(SendError(unsafe { self.val.assume_init_read() }))
        }
    }
}

impl<T> Drop for SendSlot<'_, T> {
    fn drop(&mut self) {
        if self.live {
            // SAFETY: never sent nor taken.
            unsafe { self.val.assume_init_drop() };
        }
    }
}

/// Runs a select over prepared cases: `Some(i, ok)` or None for default.
#[doc(hidden)]
#[inline]
pub fn __select(cases: &mut [Scase], has_default: bool) -> (usize, bool) {
    let sel = if cases.len() == 1 {
        select_one(&cases[0], !has_default)
    } else {
        selectgo(cases, !has_default, None)
    };
    match sel {
        Selected::Case(i, ok) => (i, ok),
        _ => (usize::MAX, false),
    }
}

/// The impossible "no case chosen" of a select without default (a
/// function, not `unreachable!`, to keep macro recursion shallow).
#[doc(hidden)]
#[cold]
pub fn __select_none() -> ! {
    crate::throw::throw("select: no case chosen")
}

/// Like [`__select`] with a timeout (`default(timeout)`): `usize::MAX` if
/// no case proceeds within `timeout`. A case ready at once arms no timer;
/// a parked select arms one timeout entry, which goes stale (inert, and
/// dropped by the heap's bulk purge) when a case wins first.
#[doc(hidden)]
pub fn __select_timeout(cases: &mut [Scase], timeout: std::time::Duration) -> (usize, bool) {
    match selectgo(cases, true, crate::time::timeout_deadline(timeout)) {
        Selected::Case(i, ok) => (i, ok),
        _ => (usize::MAX, false),
    }
}

/// Receives from whichever of `rxs` is ready first: a `select!` whose
/// receive cases are only known at run time (Go's `reflect.Select` with
/// `SelectRecv` cases; the usual fan-in over a slice of channels).
/// Returns the index (in iteration order) of the channel chosen and what
/// its receive gave: `Err(RecvError)` if that channel is closed and
/// drained. Ready channels are chosen uniformly at random (Go's selectgo).
///
/// Blocking: parks the goroutine (blocks a plain thread) until one is
/// ready; with no channels at all it blocks forever, as Go's `select {}`
/// (deadlock detection reports it if nothing else can run). Allocates two
/// small vectors per call (one slot per channel).
///
/// ```
/// let (txs, rxs): (Vec<goro::Sender<u32>>, Vec<goro::Receiver<u32>>) =
///     (0..3).map(|_| goro::chan(1)).unzip();
/// txs[2].send(7).unwrap();
/// assert_eq!(goro::select_recv(&rxs), (2, Ok(7)));
/// drop(txs); // every channel closes: each is ready with Err(RecvError)
/// assert!(goro::select_recv(&rxs).1.is_err());
/// ```
pub fn select_recv<'a, T: 'a>(
    rxs: impl IntoIterator<Item = &'a Receiver<T>>,
) -> (usize, Result<T, RecvError>) {
    match select_recv_dyn(rxs, true, None) {
        Some(r) => r,
        None => __select_none(),
    }
}

/// [`select_recv`] with Go's `default`: `None` if no channel is ready now.
/// Never blocks.
pub fn try_select_recv<'a, T: 'a>(
    rxs: impl IntoIterator<Item = &'a Receiver<T>>,
) -> Option<(usize, Result<T, RecvError>)> {
    select_recv_dyn(rxs, false, None)
}

/// [`select_recv`] that gives up after `timeout` (ns precision; a
/// `Duration` too large to represent waits forever): `None` if no channel
/// became ready in time. Parks the goroutine (blocks a plain thread) for at
/// most `timeout`; the timeout typically fires 50-100 µs late (Linux's
/// timer slack). Go's `reflect.Select` with a `time.After` case added.
pub fn select_recv_timeout<'a, T: 'a>(
    rxs: impl IntoIterator<Item = &'a Receiver<T>>,
    timeout: std::time::Duration,
) -> Option<(usize, Result<T, RecvError>)> {
    select_recv_dyn(rxs, true, crate::time::timeout_deadline(timeout))
}

fn select_recv_dyn<'a, T: 'a>(
    rxs: impl IntoIterator<Item = &'a Receiver<T>>,
    block: bool,
    deadline: Option<i64>,
) -> Option<(usize, Result<T, RecvError>)> {
    let mut slots: Vec<RecvSlot<'a, T>> = rxs.into_iter().map(RecvSlot::new).collect();
    // The cases point into `slots`, which is not resized from here on.
    let mut cases: Vec<Scase> = slots.iter_mut().map(|s| s.case()).collect();
    match selectgo(&mut cases, block, deadline) {
        // SAFETY: case i is the one selectgo chose, with its `ok`; finished
        // once.
        Selected::Case(i, ok) => Some((i, unsafe { slots[i].finish(ok) })),
        Selected::Default | Selected::Timeout => None,
    }
}

// ---------------------------------------------------------------------------
// Dynamic select: cases of any channel types, in both directions, built at
// run time (Go's reflect.Select).

/// A select whose cases are only known at run time, receives and sends on
/// channels of any element types (Go's `reflect.Select`; the builder shape
/// of crossbeam-channel's `Select`). Add cases with [`recv`](Select::recv)
/// and [`send`](Select::send), each returning its index, then run it once
/// with [`select`](Select::select), [`try_select`](Select::try_select) or
/// [`select_timeout`](Select::select_timeout). As in `select!`, the chosen
/// operation has happened when these return (Go's semantics, unlike
/// crossbeam's): take its result from the [`SelectedOperation`].
///
/// Values of send cases not chosen are dropped with the `Select`. Each
/// case is one small allocation; for a fixed set of cases `select!` costs
/// less, and for receives of one type [`select_recv`] does.
///
/// ```
/// use goro::Select;
/// let (tx_num, rx_num) = goro::chan::<u32>(1);
/// let (tx_txt, rx_txt) = goro::chan::<String>(0); // nobody receives: never ready
/// tx_num.send(7).unwrap();
/// let mut sel = Select::new();
/// let r = sel.recv(&rx_num);
/// let s = sel.send(&tx_txt, "hello".to_string());
/// let op = sel.select();
/// assert_eq!(op.index(), r);
/// assert_eq!(op.recv(&rx_num), Ok(7));
/// # let _ = (s, rx_txt);
/// ```
#[derive(Default)]
pub struct Select<'a> {
    slots: Vec<Box<dyn DynCase + 'a>>,
}

/// The case a [`Select`] chose, whose operation has happened. Read its
/// result with [`recv`](SelectedOperation::recv) or
/// [`send`](SelectedOperation::send) (or drop it: a received value is then
/// dropped).
pub struct SelectedOperation<'a> {
    slots: Vec<Box<dyn DynCase + 'a>>,
    index: usize,
    /// Whether the operation happened (false: the channel was closed).
    ok: bool,
}

/// A type-erased case: a channel handle and a value slot.
trait DynCase {
    fn case(&mut self) -> Scase;
    fn chan(&self) -> *const Hchan;
    fn is_send(&self) -> bool;
    fn elem_type(&self) -> std::any::TypeId;
    /// The slot, a `MaybeUninit<T>` of `elem_type`.
    fn val(&mut self) -> *mut u8;
    /// Whether the slot holds a value (to drop with the case).
    fn set_live(&mut self, live: bool);
}

struct DynSlot<'a, T, H> {
    handle: &'a H,
    val: MaybeUninit<T>,
    live: bool,
    send: bool,
}

impl<T: 'static, H: ChanHandle> DynCase for DynSlot<'_, T, H> {
    fn case(&mut self) -> Scase {
        let c = self.handle.hchan();
        let elem = self.val.as_mut_ptr().cast();
        if self.send {
            Scase::send(c, elem)
        } else {
            Scase::recv(c, elem)
        }
    }
    fn chan(&self) -> *const Hchan {
        Arc::as_ptr(self.handle.hchan())
    }
    fn is_send(&self) -> bool {
        self.send
    }
    fn elem_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<T>()
    }
    fn val(&mut self) -> *mut u8 {
        self.val.as_mut_ptr().cast()
    }
    fn set_live(&mut self, live: bool) {
        self.live = live;
    }
}

impl<T, H> Drop for DynSlot<'_, T, H> {
    fn drop(&mut self) {
        if self.live {
            // SAFETY: live means the slot holds a value nobody took: an
            // unsent send value, or a received one never read.
            unsafe { self.val.assume_init_drop() };
        }
    }
}

/// A channel end a dynamic case can hold.
trait ChanHandle {
    fn hchan(&self) -> &Arc<Hchan>;
}

impl<T> ChanHandle for Receiver<T> {
    fn hchan(&self) -> &Arc<Hchan> {
        &self.c
    }
}

impl<T> ChanHandle for Sender<T> {
    fn hchan(&self) -> &Arc<Hchan> {
        &self.c
    }
}

impl<'a> Select<'a> {
    /// An empty select. Never blocks. Go's empty `[]reflect.SelectCase`.
    pub fn new() -> Select<'a> {
        Select { slots: Vec::new() }
    }

    /// Adds a receive from `rx`; returns the case's index (0, 1, ... in
    /// the order cases are added). Only records the case (one small
    /// allocation); never blocks. Go's `reflect.SelectCase` with `SelectRecv`.
    pub fn recv<T: 'static>(&mut self, rx: &'a Receiver<T>) -> usize {
        self.slots.push(Box::new(DynSlot {
            handle: rx,
            val: MaybeUninit::<T>::uninit(),
            live: false,
            send: false,
        }));
        self.slots.len() - 1
    }

    /// Adds a send of `v` on `tx`; returns the case's index. If another
    /// case is chosen, `v` is dropped with the select. Only records the
    /// case (one small allocation); never blocks. Go's `reflect.SelectCase`
    /// with `SelectSend`.
    pub fn send<T: 'static>(&mut self, tx: &'a Sender<T>, v: T) -> usize {
        self.slots.push(Box::new(DynSlot {
            handle: tx,
            val: MaybeUninit::new(v),
            live: true,
            send: true,
        }));
        self.slots.len() - 1
    }

    /// Waits until one case can proceed and performs it; ready cases are
    /// chosen uniformly at random (Go's selectgo). Parks the goroutine
    /// (blocks a plain thread). A case on a closed channel is ready (its
    /// result is `Err`). With no cases, blocks forever, as Go's
    /// `select {}`.
    pub fn select(self) -> SelectedOperation<'a> {
        match self.run(true, None) {
            Ok(op) => op,
            Err(_) => __select_none(),
        }
    }

    /// [`select`](Select::select) with Go's `default`: `None` if no case
    /// can proceed now. Never blocks.
    pub fn try_select(self) -> Option<SelectedOperation<'a>> {
        self.run(false, None).ok()
    }

    /// [`select`](Select::select) that gives up after `timeout` (a
    /// `Duration` too large to represent waits forever): `None` if no case
    /// could proceed in time. Parks the goroutine (blocks a plain thread)
    /// for at most `timeout`, ns precision; the timeout typically fires
    /// 50-100 µs late (Linux's timer slack). Go's `reflect.Select` with a
    /// `time.After` case added.
    pub fn select_timeout(self, timeout: std::time::Duration) -> Option<SelectedOperation<'a>> {
        self.run(true, crate::time::timeout_deadline(timeout)).ok()
    }

    fn run(mut self, block: bool, deadline: Option<i64>) -> Result<SelectedOperation<'a>, ()> {
        // The cases point into the boxed slots, which do not move.
        let mut cases: Vec<Scase> = self.slots.iter_mut().map(|s| s.case()).collect();
        match selectgo(&mut cases, block, deadline) {
            Selected::Case(index, ok) => {
                let slot = &mut self.slots[index];
                if slot.is_send() {
                    // Sent: the channel moved the value out. Not sent
                    // (closed): it is still there for `send` to return.
                    slot.set_live(!ok);
                } else {
                    // Received: the slot holds the value.
                    slot.set_live(ok);
                }
                Ok(SelectedOperation {
                    slots: std::mem::take(&mut self.slots),
                    index,
                    ok,
                })
            }
            Selected::Default | Selected::Timeout => Err(()),
        }
    }
}

impl std::fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("cases", &self.slots.len())
            .finish()
    }
}

impl<'a> SelectedOperation<'a> {
    /// The index of the chosen case, as returned by
    /// [`Select::recv`]/[`Select::send`]: the `chosen` of Go's
    /// `reflect.Select`. Never blocks.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The chosen case's receive result: the value, or `Err(RecvError)` if
    /// the channel was closed and drained (the `recv, recvOK` of Go's
    /// `reflect.Select`). Never blocks: the receive has already happened.
    ///
    /// Panics if the chosen case is not a receive from `rx` (pass the same
    /// receiver, or a clone of it).
    pub fn recv<T: 'static>(mut self, rx: &Receiver<T>) -> Result<T, RecvError> {
        let ok = self.ok;
        let slot = self.chosen::<T>(Arc::as_ptr(&rx.c), false);
        if !ok {
            return Err(RecvError);
        }
        slot.set_live(false);
        // SAFETY: the receive happened (ok), so it wrote a T (the type
        // checked by `chosen`) into the slot; live is now false, so it is
        // read once, here, and dropping the slots below skips it.
        let v = unsafe { slot.val().cast::<T>().read() };
        // The other cases' values are dropped while `v` is a local: if a
        // destructor panics, the unwind drops `v` too (dropped after the
        // return value was built, it leaked; h41).
        drop(std::mem::take(&mut self.slots));
        Ok(v)
    }

    /// The chosen case's send result: `Ok(())` if the value was sent,
    /// `Err(SendError(v))` with the value back if the channel was closed
    /// (where Go's `reflect.Select` panics). Never blocks: the send has
    /// already happened or failed.
    ///
    /// Panics if the chosen case is not a send on `tx`.
    pub fn send<T: 'static>(mut self, tx: &Sender<T>) -> Result<(), SendError<T>> {
        let ok = self.ok;
        let slot = self.chosen::<T>(Arc::as_ptr(&tx.c), true);
        if ok {
            return Ok(());
        }
        slot.set_live(false);
        // SAFETY: the send did not happen (!ok), so its T (the type
        // checked by `chosen`) is still in the slot; live is now false, so
        // it is read once, here, and dropping the slots below skips it.
        let v = unsafe { slot.val().cast::<T>().read() };
        // As in `recv`: dropped while `v` is a local.
        drop(std::mem::take(&mut self.slots));
        Err(SendError(v))
    }

    fn chosen<T: 'static>(&mut self, c: *const Hchan, send: bool) -> &mut (dyn DynCase + 'a) {
        let slot = &mut *self.slots[self.index];
        assert!(
            slot.is_send() == send
                && slot.chan() == c
                && slot.elem_type() == std::any::TypeId::of::<T>(),
            "goro::SelectedOperation::{}: case {} is not a {} on this channel",
            if send { "send" } else { "recv" },
            self.index,
            if send { "send" } else { "receive" },
        );
        slot
    }
}

impl std::fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Waits on several channel operations at once; Go's `select`.
///
/// ```
/// let (tx, rx) = goro::chan::<i32>(1);
/// tx.send(7).unwrap();
/// let v = goro::select! {
///     recv(rx) -> msg => msg.unwrap(),
///     recv(goro::time::after(std::time::Duration::from_secs(1))) -> _ => -1,
/// };
/// assert_eq!(v, 7);
/// ```
///
/// crossbeam-channel's forms work too: block arms without commas and a
/// `default(timeout)` arm.
///
/// ```
/// use std::time::Duration;
/// let (tx, rx) = goro::chan::<i32>(1);
/// let idle = goro::never::<i32>(); // a disabled case
/// tx.send(1).unwrap();
/// let got = goro::select! {
///     recv(idle) -> _ => { unreachable!() }
///     recv(rx) -> v => { v.unwrap() }
///     default(Duration::from_secs(1)) => { 0 }
/// };
/// assert_eq!(got, 1);
/// ```
///
/// Syntax as crossbeam-channel's `select!` (see docs/SELECT.md for the
/// remaining differences). Cases: `recv(rx) -> res => body`,
/// `send(tx, value) -> res => body`, and at most one of `default => body`
/// (do not block) or `default(timeout) => body` (block at most `timeout`, a
/// `Duration`; runs the body if no case proceeded by then). Arms are
/// separated by commas; an arm whose body is a block needs none. A
/// trailing comma inside the parentheses (`recv(rx,)`, `send(tx, v,)`,
/// `default(timeout,)`) is accepted, as rustfmt may write one.
/// [`never()`](crate::never) gives a case that is never ready (a disabled
/// case, Go's nil channel). `res` is `Result<T, RecvError>` or
/// `Result<(), SendError<T>>`. Channels are taken by reference; send values
/// are evaluated up front (as in Go; crossbeam evaluates only the chosen
/// one) and dropped, if their case is not chosen, before the chosen body
/// runs; a body may reassign or move its own case's channel (Go's
/// `out = nil`).
/// When several cases are ready one is chosen uniformly at random. Without
/// `default` the select parks the goroutine (blocks the OS thread) until a
/// case proceeds. The whole `select!` is an expression; bodies may `return`,
/// `break` or `continue`.
#[macro_export]
macro_rules! select {
    ($($tt:tt)*) => {
        $crate::__select_parse!(@slots () @n (0usize) @default () $($tt)*)
    };
}

/// The `select!` muncher. One recursion per arm (so a 64-case select stays
/// within the default `recursion_limit` of 128): each arm binds its
/// channel reference and typed slot to a fresh hygienic `__slot` (in source
/// order, as Go evaluates operands) and appends `[slot (index) (pattern)
/// (body)]` to the accumulator; the last step runs the select and
/// dispatches with one `match`.
#[doc(hidden)]
#[macro_export]
macro_rules! __select_parse {
    // A comma between arms (optional after a block body, as in crossbeam).
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) , $($rest:tt)*) => {
        $crate::__select_parse!(@slots ($($s)*) @n ($n) @default ($($d)*) $($rest)*)
    };
    // recv case, body is a block: no comma needed before the next arm
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) recv($rx:expr $(,)?) -> $res:pat => $body:block , $($rest:tt)*) => {{
        let __rx = &$rx;
        let mut __slot = $crate::__private::RecvSlot::new(__rx);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($rest)*)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) recv($rx:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {{
        let __rx = &$rx;
        let mut __slot = $crate::__private::RecvSlot::new(__rx);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($rest)*)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) recv($rx:expr $(,)?) -> $res:pat => $body:expr $(, $($rest:tt)*)?) => {{
        let __rx = &$rx;
        let mut __slot = $crate::__private::RecvSlot::new(__rx);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($($rest)*)?)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) send($tx:expr, $val:expr $(,)?) -> $res:pat => $body:block , $($rest:tt)*) => {{
        let __tx = &$tx;
        let mut __slot = $crate::__private::SendSlot::new(__tx, $val);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($rest)*)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) send($tx:expr, $val:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {{
        let __tx = &$tx;
        let mut __slot = $crate::__private::SendSlot::new(__tx, $val);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($rest)*)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) send($tx:expr, $val:expr $(,)?) -> $res:pat => $body:expr $(, $($rest:tt)*)?) => {{
        let __tx = &$tx;
        let mut __slot = $crate::__private::SendSlot::new(__tx, $val);
        $crate::__select_parse!(@slots ($($s)* [__slot __r ($n) ($res) ($body)]) @n ($n + 1usize) @default ($($d)*) $($($rest)*)?)
    }};
    // default(timeout): crossbeam's form; runs if nothing is ready in time.
    (@slots ($($s:tt)*) @n ($n:expr) @default () default($t:expr $(,)?) => $body:block $($rest:tt)*) => {
        $crate::__select_parse!(@slots ($($s)*) @n ($n) @default ((timeout $t) ($body)) $($rest)*)
    };
    (@slots ($($s:tt)*) @n ($n:expr) @default () default($t:expr $(,)?) => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select_parse!(@slots ($($s)*) @n ($n) @default ((timeout $t) ($body)) $($($rest)*)?)
    };
    (@slots ($($s:tt)*) @n ($n:expr) @default () default => $body:block $($rest:tt)*) => {
        $crate::__select_parse!(@slots ($($s)*) @n ($n) @default ((now) ($body)) $($rest)*)
    };
    (@slots ($($s:tt)*) @n ($n:expr) @default () default => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select_parse!(@slots ($($s)*) @n ($n) @default ((now) ($body)) $($($rest)*)?)
    };
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)+) default $($rest:tt)*) => {
        compile_error!("select!: more than one `default` arm")
    };
    // Done: run the select and dispatch.
    (@slots ($([$slot:ident $r:ident ($i:expr) ($res:pat) ($body:expr)])*) @n ($n:expr) @default ()) => {{
        let (__idx, __ok) = $crate::__private::__select(&mut [$($slot.case()),*], false);
        $crate::__select_dispatch!(__idx __ok ($crate::__private::__select_none()) $([$slot $r ($i) ($res) ($body)])*)
    }};
    (@slots ($([$slot:ident $r:ident ($i:expr) ($res:pat) ($body:expr)])*) @n ($n:expr) @default ((now) ($dbody:expr))) => {{
        let (__idx, __ok) = $crate::__private::__select(&mut [$($slot.case()),*], true);
        $crate::__select_dispatch!(__idx __ok ($dbody) $([$slot $r ($i) ($res) ($body)])*)
    }};
    (@slots ($([$slot:ident $r:ident ($i:expr) ($res:pat) ($body:expr)])*) @n ($n:expr) @default ((timeout $t:expr) ($dbody:expr))) => {{
        let __timeout: ::core::time::Duration = $t;
        let (__idx, __ok) = $crate::__private::__select_timeout(&mut [$($slot.case()),*], __timeout);
        $crate::__select_dispatch!(__idx __ok ($dbody) $([$slot $r ($i) ($res) ($body)])*)
    }};
    (@slots ($($s:tt)*) @n ($n:expr) @default ($($d:tt)*) $($rest:tt)+) => {
        compile_error!(concat!(
            "select!: expected `recv(rx) -> res => body`, `send(tx, v) -> res => body`, ",
            "`default => body` or `default(timeout) => body`, found: ",
            stringify!($($rest)+)
        ))
    };
}

/// Runs the chosen arm's body (or the default body for `usize::MAX`).
#[doc(hidden)]
#[macro_export]
macro_rules! __select_dispatch {
    ($idx:ident $ok:ident ($dbody:expr) $([$slot:ident $r:ident ($i:expr) ($res:pat) ($body:expr)])*) => {{
        // Every slot is finished (the chosen one) and dropped before any
        // body runs: a body may then reassign or move its own channel (Go's
        // `out = nil` to disable a case), and values of the cases not
        // chosen are already dropped (a body waiting for a channel whose
        // last Sender was such a value does not wait for ever). The chosen
        // slot is finished before any slot is dropped: if an unchosen send
        // value's destructor panics, the chosen case's result is then a
        // local that the unwind drops (a received value finished after the
        // panic would stay in its slot's `MaybeUninit` and leak; h41).
        $(
            let $r = if $idx == $i {
                // SAFETY: `$i` is the case `__select` chose, reported with
                // its `ok`, and this is the only `finish` call on the slot.
                ::core::option::Option::Some(unsafe { $slot.finish($ok) })
            } else {
                ::core::option::Option::None
            };
        )*
        $(
            $crate::__private::__slot_done($slot);
        )*
        match $idx {
            $(
                __i if __i == $i => {
                    let $res = match $r {
                        ::core::option::Option::Some(__v) => __v,
                        ::core::option::Option::None => ::core::unreachable!(),
                    };
                    $body
                }
            )*
            _ => $dbody,
        }
    }};
}
