//! The network poller (Go's netpoll.go + netpoll_epoll.go): one epoll
//! instance, an eventfd to break a blocking wait, and a poll descriptor
//! (`PollDesc`, Go's pollDesc) per registered fd.
//!
//! An M with nothing to run blocks here until the earliest timer, or forever
//! while goroutines wait on sockets (findRunnable, sched.rs); `netpoll_break`
//! wakes it when an earlier timer appears. findRunnable also polls without
//! blocking before it steals, and sysmon polls if nobody has for 10 ms.
//!
//! # Readiness protocol (Go's netpoll.go essay, as implemented here)
//!
//! Each fd is registered once, edge-triggered, for input and output
//! (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET). Its `PollDesc` has two wait slots,
//! `rg` (reader) and `wg` (writer), each an `AtomicUsize` in one of four
//! states:
//!
//! - `PD_NIL`: no readiness recorded, nobody waiting;
//! - `PD_READY`: an edge arrived that nobody has consumed yet;
//! - `PD_WAIT`: a goroutine is about to park (it has claimed the slot but
//!   is not parked yet);
//! - a `*mut G`: that goroutine is parked (status Waiting) on the slot.
//!
//! The goroutine (`PollDesc::wait`, Go's netpollblock) first tried its
//! syscall and got EAGAIN. It then consumes `PD_READY` (READY -> NIL, and
//! retries the syscall: the edge may have come after its EAGAIN) or claims
//! the slot (NIL -> WAIT), re-checks `closing`, and parks with a commit
//! function that runs on g0 after the G is Waiting and CASes WAIT -> G (Go's
//! netpollblockcommit). If that CAS fails, a waker got there first (it
//! turned WAIT into READY or NIL) and the G resumes at once. After waking,
//! the G swaps the slot to NIL and retries its syscall; it never trusts the
//! wake-up itself, so a spurious one costs a syscall, never correctness.
//!
//! A waker (`unblock`, Go's netpollunblock) is epoll (`ioready`: the slot
//! becomes READY), a deadline timer or `evict` (`!ioready`: the slot
//! becomes NIL). It CASes the slot from what it saw; if it saw a G it now
//! owns that G and is the only one that may ready it, because the CAS took
//! the G out of the slot. Hence no G is readied twice and none is lost:
//!
//! - edge before the G claims the slot: the slot is READY; the G consumes
//!   it and retries its syscall;
//! - edge while the slot is WAIT: the waker sets READY, the commit CAS
//!   fails, the G does not sleep;
//! - edge after the commit: the waker takes the G and readies it.
//!
//! Closing (`evict`, Go's poll_runtime_pollUnblock): `closing` is set
//! (SeqCst) before both slots are swapped; the G claims its slot (SeqCst)
//! before it loads `closing`. Either the G sees `closing` and does not
//! park, or `evict`'s swap sees WAIT or the G and wakes it. The fd is
//! removed from epoll and closed only after the owner is dropped (Rust
//! ownership guarantees nobody is inside an operation on it then), and the
//! descriptor is recycled with `fdseq` bumped: epoll events already
//! harvested for the old fd carry the old `fdseq` in their token (Go's
//! tagged pointer) and are dropped, so fd reuse cannot ready a stranger.
//!
//! Deadlines (Go's netpolldeadlineimpl): a parking G with a deadline bumps
//! `rseq` (its wait's generation `seq`) and records `seq` and the deadline
//! in the direction's deadline timer; when the wait ends the G bumps
//! `rseq` again, which cancels it. One runtime-timer entry per direction,
//! the carrier (`Action::Deadline`), serves successive waits, as Go's
//! pd.rt does: a wait queues a new carrier only if its deadline is earlier
//! than the queued one's; a carrier that comes up before the current
//! wait's deadline re-queues itself there, one that finds no wait on
//! retires (`DeadlineTimer`). A carrier that comes up after the deadline
//! of the wait `seq` calls `deadline_fired(seq)`, which unblocks the slot
//! like `evict` does if `rseq` still reads `seq`; the G compares the clock
//! with its deadline and returns `TimedOut`. A firing that loses the race
//! with a new wait of the same G only causes a spurious wake-up (see
//! above).
//!
//! Breaks: `netpoll_break` makes the (level-triggered) eventfd readable
//! once per blocked poll (`WAKE_SIG`); only a blocking `netpoll` drains it.
//! A non-blocking poll (findRunnable, sysmon) also sees the event but must
//! leave it, or the M blocked in epoll_wait would miss its wake-up and
//! sleep past a timer (Go's netpoll has the same rule).
//!
//! `NETPOLL_WAITERS` counts goroutines between claiming a slot and waking
//! (Go's netpollWaiters) so findRunnable and sysmon skip epoll entirely
//! when nobody waits on the network: one Relaxed load.
//!
//! Descriptors are never freed (a free list recycles them), like Gs: the
//! timer heap and in-flight epoll events may hold their address forever.

use crate::g::G;
use crate::timer::{Carrier, CarrierState};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The epoll fd and the break eventfd: stored once by `init` with
/// Release, which every Acquire load pairs with (the loads also follow
/// the start's own Release of STARTED).
static EPFD: AtomicI32 = AtomicI32::new(-1);
static BREAK_FD: AtomicI32 = AtomicI32::new(-1);
/// 1 while a break is pending (Go's netpollWakeSig): avoids a write per call.
/// The blocking poller's Release reset after draining the eventfd pairs
/// with a breaker's AcqRel CAS: a break that sees 0 writes after the drain.
static WAKE_SIG: AtomicU32 = AtomicU32::new(0);

/// Token of the eventfd in epoll events.
const BREAK_TOKEN: u64 = u64::MAX;

/// Go's netpollinit. Called at runtime start; again (a no-op) when an
/// earlier start failed after it. On failure closes what it opened.
pub(crate) fn init() -> std::io::Result<()> {
    // Acquire: pairs with the Release below (starts are serialised anyway).
    if EPFD.load(Ordering::Acquire) >= 0 {
        return Ok(());
    }
    let fail = |fds: &[i32]| {
        let e = crate::os::last_os_error();
        for &fd in fds {
            // SAFETY: fds we created above and published nowhere.
            unsafe { libc::close(fd) };
        }
        Err(e)
    };
    // SAFETY: plain syscalls creating new fds.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return fail(&[]);
    }
    // SAFETY: as above.
    let ev = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if ev < 0 {
        return fail(&[ep]);
    }
    let mut e = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: BREAK_TOKEN,
    };
    // SAFETY: ep and ev are fds we own; e is a valid event.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ev, &mut e) } < 0 {
        return fail(&[ep, ev]);
    }
    // Release: publishes the fds to Ms that Acquire them.
    BREAK_FD.store(ev, Ordering::Release);
    EPFD.store(ep, Ordering::Release);
    Ok(())
}

/// Go's netpollBreak: wakes an M blocked in `netpoll`. Any thread.
pub(crate) fn netpoll_break() {
    // AcqRel: only the first breaker writes; the poller's reset pairs with it.
    if WAKE_SIG
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let one: u64 = 1;
    let fd = BREAK_FD.load(Ordering::Acquire);
    // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Go's netpoll: waits up to `delay` ns (<0 forever, 0 non-blocking) and
/// pushes the Gs made runnable onto `out` (still Waiting: the caller makes
/// them Runnable, e.g. with inject_glist). Runs with or without a P.
pub(crate) fn netpoll(delay: i64, out: &mut Vec<*mut G>) {
    let ep = EPFD.load(Ordering::Acquire);
    if ep < 0 {
        return;
    }
    // Uninitialised: the kernel fills the first n (a zeroed array cost
    // 1.5 KiB of stores per call, most of them on lines nothing reads).
    let mut events = [const { core::mem::MaybeUninit::<libc::epoll_event>::uninit() }; 128];
    let n = wait(ep, &mut events, delay);
    for e in events.iter().take(n.max(0) as usize) {
        // SAFETY: epoll_wait initialised the first n entries.
        let e = unsafe { e.assume_init_ref() };
        let token = e.u64;
        if token == BREAK_TOKEN {
            // Only a blocking poll drains the break (Go does the same): a
            // non-blocking poll (findRunnable, sysmon) that consumed it would
            // leave the M blocked in epoll_wait asleep. The eventfd is
            // level-triggered, so the blocked M still sees it.
            if delay != 0 {
                let mut buf: u64 = 0;
                let fd = BREAK_FD.load(Ordering::Acquire);
                // SAFETY: reads 8 bytes into a valid u64 from our eventfd.
                unsafe { libc::read(fd, (&mut buf as *mut u64).cast(), 8) };
                WAKE_SIG.store(0, Ordering::Release);
            }
            continue;
        }
        let ev = e.events;
        let pdp = (token & PTR_MASK) as usize as *const PollDesc;
        // SAFETY: tokens are addresses of leaked, never-freed PollDescs.
        let pd = unsafe { &*pdp };
        // Acquire pairs with the Release bump in `free`: a stale token
        // (fd closed and descriptor recycled since) is dropped.
        if pd.fdseq.load(Ordering::Acquire) & TAG_MASK != token >> TAG_SHIFT {
            continue;
        }
        let (r, w) = (
            libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR,
            libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR,
        );
        if ev & r as u32 != 0 {
            if ev & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                pd.rclosed.store(true, Ordering::SeqCst);
                if ev & libc::EPOLLRDHUP as u32 != 0 {
                    pd.rdhup.store(true, Ordering::SeqCst);
                }
            }
            pd.rtick.fetch_add(1, Ordering::SeqCst);
            ready_cold(&pd.rg, out);
        }
        if ev & w as u32 != 0 {
            pd.wtick.fetch_add(1, Ordering::SeqCst);
            ready_cold(&pd.wg, out);
        }
    }
    if !out.is_empty() && crate::trace::on() {
        crate::trace::netpoll(out.len());
    }
}

// ---------------------------------------------------------------------------
// Poll descriptors (see the essay at the top of this file).

/// Slot state: nothing recorded, nobody waiting (Go's pdNil).
pub(crate) const PD_NIL: usize = 0;
/// Slot state: an unconsumed readiness edge (Go's pdReady).
pub(crate) const PD_READY: usize = 1;
/// Slot state: a G is about to park (Go's pdWait). Any larger value is the
/// parked `*mut G`.
pub(crate) const PD_WAIT: usize = 2;

/// Token layout: descriptor address in the low 48 bits, `fdseq` tag above
/// (Go's taggedPointer). User addresses fit in 48 bits on x86_64/aarch64.
const TAG_SHIFT: u32 = 48;
const PTR_MASK: u64 = (1 << TAG_SHIFT) - 1;
const TAG_MASK: u64 = (1 << (64 - TAG_SHIFT)) - 1;

/// Goroutines between claiming a wait slot and waking (Go's
/// netpollWaiters). Relaxed everywhere: it only decides whether polling is
/// worth a syscall; a G that parks makes its own M go through findRunnable,
/// which reads it after the G's increment on the same thread.
static NETPOLL_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Whether any goroutine waits on a socket (Go's netpollWaiters > 0).
#[inline]
pub(crate) fn has_waiters() -> bool {
    NETPOLL_WAITERS.load(Ordering::Relaxed) > 0
}

/// Which side of a descriptor an operation waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Readable (also accept, and errors/hang-ups).
    Read,
    /// Writable (also connect completion).
    Write,
}

/// Go's pollDesc: the poller's record of one registered fd.
///
/// One cache line (63 bytes of fields, aligned to 64): netpoll's
/// harvest and the waiter's checks each cost at most one miss on a
/// descriptor that sat idle; malloc's 16-byte alignment let three in four
/// straddle two lines (docs/BENCHMARKS.md, session 27).
#[repr(align(64))]
pub(crate) struct PollDesc {
    /// The fd; -1 while on the free list. Owner only (set in `open`);
    /// Relaxed: read by the owner, or published with the descriptor by
    /// epoll_ctl.
    fd: AtomicI32,
    /// Generation, bumped when the descriptor is freed (Go's fdseq);
    /// tagged into epoll tokens. Release in `free`, Acquire in `netpoll`.
    fdseq: AtomicU64,
    /// Set by `evict` (SeqCst: pairs with the slot claim in `wait`, see
    /// the essay); never cleared until the descriptor is recycled.
    closing: AtomicBool,
    /// Reader and writer slots: PD_NIL/PD_READY/PD_WAIT/*mut G.
    rg: AtomicUsize,
    wg: AtomicUsize,
    /// Deadline generations: bumping cancels an armed deadline timer.
    rseq: AtomicU64,
    wseq: AtomicU64,
    /// Read-side edges harvested so far (tokio's readiness tick): bumped
    /// by `netpoll` before it records a readable edge. A TCP read that came
    /// back short under tick `t` drained the socket; while the tick still
    /// reads `t`, any data that arrived since has an edge waiting in epoll,
    /// so the next read may park at once instead of trying a syscall that
    /// would return EAGAIN (net/fd.rs `stream_read`). SeqCst on both sides:
    /// the reader's load before its syscall and netpoll's bump before its
    /// unblock are ordered with the slot operations that follow them.
    rtick: AtomicU32,
    /// Write-side edges harvested so far, bumped before netpoll records a
    /// writable edge. With `rtick`, tells a goroutine that waited for a
    /// direction's lock whether an edge came since its EAGAIN, whose
    /// readiness the waiter before it may have consumed (net/fd.rs
    /// `io_with`). SeqCst on both sides, as `rtick`.
    wtick: AtomicU32,
    /// Sticky: netpoll saw EPOLLRDHUP, EPOLLHUP or EPOLLERR (tokio's
    /// READ_CLOSED, which clearing never removes). A short read can then
    /// leave an EOF or error behind whose edge is spent, so reads never
    /// skip their syscall again. Set (SeqCst) before the tick bump.
    rclosed: AtomicBool,
    /// Sticky: the fd was seen with EPOLLRDHUP (by netpoll) or POLLRDHUP
    /// (by a thread's poll(2) in `wait_thread`). For a datagram socket
    /// that is exactly "its receiving side is shut down" (the kernel's
    /// RCV_SHUTDOWN, which nothing clears), the state in which std's
    /// blocking recv returns 0 but the non-blocking one EAGAIN, with no
    /// further edge to wait for (net/fd.rs `dgram_read`). Set (SeqCst)
    /// before the tick bump, as `rclosed`.
    rdhup: AtomicBool,
    /// The deadline timers, allocated at the descriptor's first timed wait
    /// and kept for its lifetime and its recycled ones (`deadlines`).
    /// Acquire/Release: the CAS that installs them publishes their
    /// initialisation.
    dl: core::sync::atomic::AtomicPtr<Deadlines>,
}

// One line, as its doc says.
const _: () = assert!(core::mem::size_of::<PollDesc>() == 64);

/// Free descriptors (Go's pollcache).
static POLL_CACHE: crate::lock_futex::RtMutex<Vec<&'static PollDesc>> =
    crate::lock_futex::RtMutex::new(Vec::new());

impl PollDesc {
    /// Registers `fd` (already non-blocking) with epoll, edge-triggered for
    /// both directions (Go's poll_runtime_pollOpen). Starts the runtime if
    /// needed. Errors: epoll_ctl's (e.g. ENOMEM, EPERM for regular files).
    pub(crate) fn open(fd: i32) -> std::io::Result<&'static PollDesc> {
        crate::ensure_started();
        // A runtime lock (Go's lock()): never preempted while holding it.
        let cached = crate::m::lock_rt(&POLL_CACHE).pop();
        let pd: &'static PollDesc = cached.unwrap_or_else(|| {
            Box::leak(Box::new(PollDesc {
                fd: AtomicI32::new(-1),
                fdseq: AtomicU64::new(0),
                closing: AtomicBool::new(false),
                rg: AtomicUsize::new(PD_NIL),
                wg: AtomicUsize::new(PD_NIL),
                rseq: AtomicU64::new(0),
                wseq: AtomicU64::new(0),
                rtick: AtomicU32::new(0),
                wtick: AtomicU32::new(0),
                rclosed: AtomicBool::new(false),
                rdhup: AtomicBool::new(false),
                dl: core::sync::atomic::AtomicPtr::new(core::ptr::null_mut()),
            }))
        });
        let addr = pd as *const PollDesc as u64;
        if addr & !PTR_MASK != 0 {
            crate::throw::throw("netpoll: descriptor address above 48 bits");
        }
        // Relaxed: the descriptor is ours alone until epoll_ctl publishes it
        // (a syscall, which orders these stores before any event for it).
        pd.fd.store(fd, Ordering::Relaxed);
        pd.closing.store(false, Ordering::Relaxed);
        pd.rg.store(PD_NIL, Ordering::Relaxed);
        pd.wg.store(PD_NIL, Ordering::Relaxed);
        pd.rclosed.store(false, Ordering::Relaxed);
        pd.rdhup.store(false, Ordering::Relaxed);
        let tag = pd.fdseq.load(Ordering::Relaxed) & TAG_MASK;
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: addr | (tag << TAG_SHIFT),
        };
        let ep = EPFD.load(Ordering::Acquire);
        // SAFETY: ep is our epoll fd, fd a caller-owned open fd, ev valid.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            let e = crate::os::last_os_error();
            // Relaxed: never published; the cache lock orders reuse.
            pd.fd.store(-1, Ordering::Relaxed);
            crate::m::lock_rt(&POLL_CACHE).push(pd);
            return Err(e);
        }
        Ok(pd)
    }

    /// The readiness tick of `mode` (see the fields `rtick`, `wtick`).
    #[inline]
    pub(crate) fn tick(&self, mode: Mode) -> u32 {
        match mode {
            Mode::Read => self.rtick.load(Ordering::SeqCst),
            Mode::Write => self.wtick.load(Ordering::SeqCst),
        }
    }

    /// Whether a hang-up or error was seen on the read side (sticky).
    #[inline]
    pub(crate) fn rclosed(&self) -> bool {
        self.rclosed.load(Ordering::SeqCst)
    }

    /// Whether a read-side hang-up (EPOLLRDHUP / POLLRDHUP) was seen
    /// (sticky; see the field).
    #[inline]
    pub(crate) fn rdhup(&self) -> bool {
        self.rdhup.load(Ordering::SeqCst)
    }

    /// The registered fd.
    pub(crate) fn fd(&self) -> i32 {
        self.fd.load(Ordering::Relaxed)
    }

    /// The `mode` direction's wait slot and deadline generation.
    fn slot_and_gen(&self, mode: Mode) -> (&AtomicUsize, &AtomicU64) {
        match mode {
            Mode::Read => (&self.rg, &self.rseq),
            Mode::Write => (&self.wg, &self.wseq),
        }
    }

    /// Whether a goroutine is parked on the `mode` slot (tests only).
    pub(crate) fn parked(&self, mode: Mode) -> bool {
        let (slot, _) = self.slot_and_gen(mode);
        // Acquire: a diagnostic read of the slot.
        slot.load(Ordering::Acquire) > PD_WAIT
    }

    /// Whether `evict` ran (Go's netpollcheckerr errClosing).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Go's poll_runtime_pollUnblock: marks the descriptor closing and wakes
    /// both waiters, which then fail with a "closed" error. Any thread, any
    /// number of times. The fd stays open and registered (see `free`).
    pub(crate) fn evict(&self) {
        // SeqCst: pairs with the slot claim in `wait` (essay: closing).
        self.closing.store(true, Ordering::SeqCst);
        // SeqCst (as everywhere on rseq/wseq): cancels armed deadline
        // timers; their check in `deadline_fired` is a SeqCst load.
        self.rseq.fetch_add(1, Ordering::SeqCst);
        self.wseq.fetch_add(1, Ordering::SeqCst);
        for slot in [&self.rg, &self.wg] {
            let gp = unblock(slot, false);
            if !gp.is_null() {
                crate::park::goready(gp);
            }
        }
    }

    /// Go's poll_runtime_pollClose: deregisters the fd (the caller closes
    /// it afterwards) and recycles the descriptor. The caller owns the
    /// socket exclusively: no operation can be waiting on it.
    pub(crate) fn free(&'static self) {
        self.evict();
        let ep = EPFD.load(Ordering::Acquire);
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: ep is our epoll fd; the fd is still open (caller closes
        // it after this returns). Errors are irrelevant: close would
        // deregister it anyway unless it was dup'd, and then DEL succeeds.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, self.fd(), &mut ev) };
        // Release: pairs with netpoll's Acquire; stale tokens now mismatch.
        self.fdseq.fetch_add(1, Ordering::Release);
        // Relaxed: the descriptor is ours until the cache lock hands it out.
        self.fd.store(-1, Ordering::Relaxed);
        crate::m::lock_rt(&POLL_CACHE).push(self);
    }

    /// Waits until the fd may be ready for `mode` (the caller then retries
    /// its syscall), the monotonic `deadline` (ns) passes, or `evict` runs.
    /// Never reports which: callers re-check the clock and `is_closing`.
    /// At most one waiter per mode (callers serialise with a lock).
    ///
    /// On a goroutine this parks the G (Go's netpollblock); on a plain
    /// thread or inside `blocking` it blocks the thread in poll(2).
    pub(crate) fn wait(&'static self, mode: Mode, deadline: Option<i64>) {
        let gp = crate::park::parkable_g();
        if gp.is_null() {
            self.wait_thread(mode, deadline);
            return;
        }
        let (slot, gen) = self.slot_and_gen(mode);
        // Claim the slot, or consume an edge (essay: the goroutine side).
        loop {
            // AcqRel: consuming READY acquires the waker's publication.
            if slot
                .compare_exchange(PD_READY, PD_NIL, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // SeqCst: the claim must precede our `closing` load (essay).
            match slot.compare_exchange(PD_NIL, PD_WAIT, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(PD_READY) => continue,
                Err(_) => crate::throw::throw("netpoll: double wait on a poll descriptor"),
            }
        }
        NETPOLL_WAITERS.fetch_add(1, Ordering::Relaxed);
        let expired = deadline.is_some_and(|d| d <= crate::os::nanotime());
        if !self.is_closing() && !expired {
            if let Some(d) = deadline {
                self.arm_deadline(mode, gen, d);
            }
            crate::park::gopark(
                Some(block_commit),
                slot as *const AtomicUsize as *mut u8,
                crate::waitreason::WaitReason::IoWait,
            );
            if deadline.is_some() {
                // Cancel the timer (it becomes stale and is purged).
                gen.fetch_add(1, Ordering::SeqCst);
            }
        }
        // AcqRel: acquires a waker's READY; releases our claim.
        let old = slot.swap(PD_NIL, Ordering::AcqRel);
        if old > PD_WAIT {
            crate::throw::throw("netpoll: corrupted poll descriptor");
        }
        NETPOLL_WAITERS.fetch_sub(1, Ordering::Relaxed);
    }

    /// Consumes a recorded edge (`PD_READY` → `PD_NIL`) of `mode` without
    /// waiting, for a caller that retries its syscall instead of waiting
    /// (net/fd.rs `io_with`): the retry covers what the edge announced, as
    /// after a `wait` that found it, and a stale `PD_READY` left behind
    /// would cost the next wait a spurious wake-up and syscall. Same
    /// callers and lock as `wait`.
    pub(crate) fn consume_ready(&self, mode: Mode) {
        let (slot, _) = self.slot_and_gen(mode);
        // AcqRel: as consuming READY in `wait`.
        let _ = slot.compare_exchange(PD_READY, PD_NIL, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// The plain-thread half of `wait`: poll(2) on the fd until it is ready
    /// or the deadline passes (EINTR and spurious returns are fine: the
    /// caller retries its syscall).
    fn wait_thread(&self, mode: Mode, deadline: Option<i64>) {
        let events = match mode {
            Mode::Read => libc::POLLIN | libc::POLLRDHUP,
            Mode::Write => libc::POLLOUT,
        };
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events,
            revents: 0,
        };
        let timeout = match deadline {
            None => -1,
            Some(d) => {
                let left = d - crate::os::nanotime();
                if left <= 0 {
                    return;
                }
                (left.saturating_add(999_999) / 1_000_000).min(i32::MAX as i64) as i32
            }
        };
        // SAFETY: pfd is one initialised pollfd (nfds = 1), a local that
        // outlives the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout) };
        // What netpoll records from EPOLLRDHUP, for a thread that never
        // meets netpoll: a shut-down datagram socket polls readable at
        // once while its recv keeps returning EAGAIN (`dgram_read`).
        // SeqCst, as netpoll's store (a plain flag read after our retry).
        if n > 0 && pfd.revents & libc::POLLRDHUP != 0 {
            self.rdhup.store(true, Ordering::SeqCst);
        }
    }
}

/// gopark commit for `wait` (Go's netpollblockcommit): publish the G in
/// its slot unless a waker changed the slot meanwhile. g0, after the G is
/// Waiting.
fn block_commit(gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg is a slot of a never-freed PollDesc (see `wait`).
    let slot = unsafe { &*(arg as *const AtomicUsize) };
    // SeqCst: publishes the G to wakers (they CAS it out with AcqRel).
    slot.compare_exchange(PD_WAIT, gp as usize, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
}

/// netpoll's wake-up of `slot`'s parked G, if any: marks it `cold` (its
/// frames are prefetched when it runs, sched.rs `prefetch_frames`) and
/// pushes it onto `out`.
fn ready_cold(slot: &AtomicUsize, out: &mut Vec<*mut G>) {
    let gp = unblock(slot, true);
    if !gp.is_null() {
        // SAFETY: unblock gave us the parked G; we own it until queued.
        unsafe { (*gp).cold.set(true) };
        out.push(gp);
    }
}

/// Go's netpollunblock: record readiness (`ioready`) or wake without it,
/// returning the parked G the caller now owns and must ready, or null.
fn unblock(slot: &AtomicUsize, ioready: bool) -> *mut G {
    loop {
        // SeqCst, as Go's gpp.Load(): in `evict` this load follows the
        // SeqCst `closing` store, and the pair must not be reordered (the
        // waiter's side is its SeqCst claim, then its `closing` load;
        // essay: closing). With Acquire, Rust's memory model lets this
        // load miss a claim made before the waiter read `closing` false,
        // and the closed waiter is never woken (the loom model
        // netpoll_model.rs found it; on x86_64 and aarch64 the code
        // generated happened to order the pair). Also acquires the G
        // that block_commit published.
        let old = slot.load(Ordering::SeqCst);
        if old == PD_READY {
            return core::ptr::null_mut();
        }
        if old == PD_NIL && !ioready {
            return core::ptr::null_mut();
        }
        let new = if ioready { PD_READY } else { PD_NIL };
        // AcqRel: taking the G out of the slot makes us its only waker.
        if slot
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return if old > PD_WAIT {
                old as *mut G
            } else {
                core::ptr::null_mut()
            };
        }
    }
}

/// The deadline timers of one descriptor (Go's pd.rt and pd.wt).
pub(crate) struct Deadlines {
    r: DeadlineTimer,
    w: DeadlineTimer,
}

/// One direction's deadline timer. One runtime-timer entry, the carrier
/// (timer.rs [`Carrier`], the protocol user timers use too), serves the
/// direction's timed waits one after another, as Go's pd.rt is one timer
/// that each SetReadDeadline moves with modtimer: a wait whose deadline is
/// no earlier than the queued carrier's time (the usual case: a server's
/// per-request timeout, each deadline later than the last) only records
/// its deadline; the carrier, when it comes up early, finds the newer
/// deadline and re-queues itself there (Go's timerModifiedLater). Before
/// session 27 every timed wait pushed its own entry, and the heap then
/// purged the cancelled ones: ~470 instructions and 12 L1 misses per
/// wake-up more than an untimed wait, against ~100 instructions and 1–2
/// misses now (`benches/misses.sh`, `netdl` against `net`).
struct DeadlineTimer {
    carrier: Carrier,
    st: crate::lock_futex::RtMutex<DeadlineState>,
}

struct DeadlineState {
    /// The generation (`rseq`/`wseq`) of the last timed wait, and its
    /// deadline (monotonic ns). The wait is still on while the
    /// direction's generation equals `seq`: its end, `evict` and the next
    /// wait all bump it.
    seq: u64,
    due: i64,
    c: CarrierState,
}

impl Deadlines {
    fn of(&self, mode: Mode) -> &DeadlineTimer {
        match mode {
            Mode::Read => &self.r,
            Mode::Write => &self.w,
        }
    }
}

impl DeadlineTimer {
    fn new() -> DeadlineTimer {
        DeadlineTimer {
            carrier: Carrier::new(),
            st: crate::lock_futex::RtMutex::new(DeadlineState {
                seq: 0,
                due: 0,
                c: CarrierState::new(),
            }),
        }
    }
}

impl PollDesc {
    /// The descriptor's deadline timers, allocated by the first timed wait
    /// (most sockets never have one) and never freed, like the descriptor.
    fn deadlines(&self) -> &Deadlines {
        // Acquire: pairs with the Release of the CAS that installed them.
        let p = self.dl.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: installed once, never freed (see above).
            return unsafe { &*p };
        }
        let new = Box::into_raw(Box::new(Deadlines {
            r: DeadlineTimer::new(),
            w: DeadlineTimer::new(),
        }));
        // AcqRel: publishes ours, or acquires the winner's.
        match self.dl.compare_exchange(
            core::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: we installed it; it is never freed.
            Ok(_) => unsafe { &*new },
            Err(won) => {
                // SAFETY: ours was never shared; the winner's is installed
                // for good.
                unsafe {
                    drop(Box::from_raw(new));
                    &*won
                }
            }
        }
    }

    /// `mode`'s deadline timer, allocating the pair if needed (the waiter).
    fn deadline_timer(&self, mode: Mode) -> &DeadlineTimer {
        self.deadlines().of(mode)
    }

    /// `mode`'s deadline timer for a heap entry's holder (the purge under
    /// the heap lock, the carrier firing): it exists, since the entry was
    /// queued by `arm_deadline` after allocating it; never allocates.
    fn queued_deadline_timer(&self, mode: Mode) -> &DeadlineTimer {
        // Acquire: as in `deadlines` (already ordered by the heap's lock
        // through which the entry came; kept for the plain reading).
        let p = self.dl.load(Ordering::Acquire);
        if p.is_null() {
            crate::throw::throw("netpoll: deadline entry without deadline timers");
        }
        // SAFETY: installed once, never freed.
        unsafe { &*p }.of(mode)
    }

    /// Starts the timed wait of generation `gen + 1` with deadline `d`
    /// (Go's netpollSetDeadline + modtimer): records it, and queues a
    /// carrier only if none is queued at or before `d`.
    fn arm_deadline(&'static self, mode: Mode, gen: &AtomicU64, d: i64) {
        let t = self.deadline_timer(mode);
        // A runtime lock, as a user timer's (timer.rs `reset`).
        let mut st = crate::m::lock_rt(&t.st);
        // SeqCst: a fresh generation for this wait only (the essay's
        // deadlines); under `st`, so the carrier sees it with its deadline.
        st.seq = gen.fetch_add(1, Ordering::SeqCst) + 1;
        st.due = d;
        if t.carrier.covers(&st.c, d) {
            return; // the queued carrier comes up first and re-queues
        }
        let carrier = t.carrier.next(&mut st.c, d);
        drop(st);
        // Added after `st` is released, as a user timer's entry: the add
        // may purge the heap. If the carrier changes in between, this
        // entry is simply stale.
        crate::time::add_timer(
            d,
            crate::timer::Action::Deadline {
                pd: self,
                mode,
                carrier,
            },
        );
    }

    /// Whether a deadline entry of generation `carrier` no longer acts for
    /// `mode` (the heap purge drops it). A carrier with no timed wait on
    /// (the wait ended, or the socket was closed) is retired here, as a
    /// stopped user timer is (`TimerCore::purgeable`): otherwise it would
    /// sit in the heap until it comes up, up to a whole timeout after its
    /// socket is gone (h26: 6,000 entries kept for 3,000 closed sockets
    /// with 600 s timeouts). Under the heap lock: `try_lock` only (a busy
    /// lock means a wait or a firing is under way: not stale).
    pub(crate) fn deadline_stale(&self, mode: Mode, carrier: u64) -> bool {
        let t = self.queued_deadline_timer(mode);
        // A non-carrier stays one (timer.rs Carrier).
        if !t.carrier.is(carrier) {
            return true;
        }
        let Some(mut st) = t.st.try_lock() else {
            return false;
        };
        let (_, gen) = self.slot_and_gen(mode);
        // SeqCst: as in deadline_carrier_fired; under `st`, so a wait that
        // started is seen.
        if t.carrier.is(carrier) && gen.load(Ordering::SeqCst) != st.seq {
            t.carrier.retire(&mut st.c);
            return true;
        }
        false
    }
}

/// The deadline carrier `carrier` of `pd`'s `mode` came up at `now` on
/// `timers` (g0 with a P, or sysmon): re-queues it at a later deadline of
/// the current wait, fires it for a passed one (Go's netpolldeadlineimpl),
/// or retires it when no timed wait is on.
pub(crate) fn deadline_carrier_fired(
    pd: &'static PollDesc,
    mode: Mode,
    carrier: u64,
    now: i64,
    timers: &crate::timer::Timers,
) {
    let t = pd.queued_deadline_timer(mode);
    let mut st = t.st.lock();
    // Final: under `st`.
    if !t.carrier.is(carrier) {
        return; // superseded by an earlier deadline's carrier
    }
    let (_, gen) = pd.slot_and_gen(mode);
    // SeqCst: as deadline_fired's load. A wait's start bumps the
    // generation under `st`, so a wait that started is seen here; one
    // that ends (bump without `st`) concurrently is caught by
    // deadline_fired's re-check.
    if gen.load(Ordering::SeqCst) != st.seq {
        // No timed wait on (it ended, or evict ran): retire.
        t.carrier.retire(&mut st.c);
        return;
    }
    if st.due > now {
        // The wait's deadline is later than this carrier's time: move.
        let due = st.due;
        Carrier::moved(&mut st.c, due);
        drop(st);
        crate::timer::requeue(
            timers,
            due,
            crate::timer::Action::Deadline { pd, mode, carrier },
        );
        return;
    }
    t.carrier.retire(&mut st.c);
    let seq = st.seq;
    drop(st);
    deadline_fired(pd, seq, mode);
}

/// The deadline of `mode`'s timed wait `seq` passed: wakes the waiter if
/// that wait is still on (Go's netpolldeadlineimpl).
fn deadline_fired(pd: &PollDesc, seq: u64, mode: Mode) {
    let (slot, gen) = pd.slot_and_gen(mode);
    // SeqCst: pairs with the bump in `wait`; a late timer at worst wakes a
    // later wait spuriously (essay: deadlines).
    if gen.load(Ordering::SeqCst) != seq {
        return;
    }
    let gp = unblock(slot, false);
    if !gp.is_null() {
        crate::park::goready(gp);
    }
}

/// epoll_pwait2 (ns resolution, Linux 5.11+), falling back to epoll_wait
/// (ms resolution, rounded up so a timer is never run early).
fn wait(ep: i32, events: &mut [core::mem::MaybeUninit<libc::epoll_event>], delay: i64) -> i32 {
    static HAVE_PWAIT2: AtomicI32 = AtomicI32::new(1);
    // Relaxed: a cached capability bit; a race only repeats the probe.
    if HAVE_PWAIT2.load(Ordering::Relaxed) == 1 {
        let ts = libc::timespec {
            tv_sec: (delay.max(0) / 1_000_000_000) as libc::time_t,
            tv_nsec: (delay.max(0) % 1_000_000_000) as libc::c_long,
        };
        let tsp = if delay < 0 {
            core::ptr::null()
        } else {
            &ts as *const libc::timespec
        };
        // SAFETY: events is a valid (writable, uninitialised) buffer of
        // events.len() entries; tsp is null or a valid timespec; no signal
        // mask is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                ep,
                events.as_mut_ptr().cast::<libc::epoll_event>(),
                events.len() as i32,
                tsp,
                core::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        } as i32;
        if r >= 0 {
            return r;
        }
        let err = crate::os::last_os_error().raw_os_error();
        if err != Some(libc::ENOSYS) {
            return 0; // EINTR: the caller re-checks its state
        }
        HAVE_PWAIT2.store(0, Ordering::Relaxed); // Relaxed: as above
    }
    let ms = if delay < 0 {
        -1
    } else if delay == 0 {
        0
    } else {
        (delay.saturating_add(999_999) / 1_000_000).min(i32::MAX as i64) as i32
    };
    // SAFETY: events is a valid (writable) buffer of events.len() entries.
    let r = unsafe {
        libc::epoll_wait(
            ep,
            events.as_mut_ptr().cast::<libc::epoll_event>(),
            events.len() as i32,
            ms,
        )
    };
    r.max(0)
}
