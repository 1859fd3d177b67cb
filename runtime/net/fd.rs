//! `NetFd`: a non-blocking socket registered with the netpoller, and the
//! retry loop every `goro::net` operation goes through (Go's internal/poll
//! FD: try the syscall; on EAGAIN wait on the poll descriptor; retry).

use super::iolock::{IoLock, Stop};
use crate::netpoll::{Mode, PollDesc};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A registered socket's poller state. Does not own the fd: the std socket
/// declared after it in each `goro::net` type does, so the descriptor is
/// deregistered (dropped first) before the fd is closed.
pub(crate) struct NetFd {
    pd: &'static PollDesc,
    /// One waiter per direction (Go's fdMutex read/write locks): taken only
    /// when an operation has to wait; a locker's deadline and `close` end
    /// its wait for the lock too (iolock.rs).
    rlock: IoLock,
    wlock: IoLock,
    /// Per-operation timeouts in ns, 0 = none. Relaxed: a plain setting,
    /// read at the start of each operation.
    rtimeout: AtomicU64,
    wtimeout: AtomicU64,
    /// `DRAINED | t` after a TCP read came back short under the poll
    /// descriptor's read tick `t` (0: no such read), tokio's
    /// clear_readiness: see [`NetFd::stream_read`]. Relaxed: a hint; a
    /// stale or torn-by-another-reader value costs one syscall or one wait
    /// for the edge epoll already holds, never a lost wake-up.
    rdrained: AtomicU64,
    /// std's non-blocking mode (`set_nonblocking(true)`): an operation
    /// that would wait returns `WouldBlock` instead. Relaxed: a plain
    /// setting, read at the start of each operation, as the timeouts.
    nonblocking: AtomicBool,
}

/// Marks a valid `rdrained` value.
const DRAINED: u64 = 1 << 32;

/// The error of an operation on a socket closed with `close()` (Go's
/// ErrNetClosing, "use of closed network connection").
pub(crate) fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "use of closed network connection",
    )
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "i/o timeout")
}

/// Monotonic deadline for a timeout (ns), None for no timeout.
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<i64> {
    timeout.and_then(crate::time::deadline_after)
}

impl NetFd {
    /// Registers `fd`, which must already be non-blocking.
    pub(crate) fn new(fd: RawFd) -> io::Result<NetFd> {
        Ok(NetFd {
            pd: PollDesc::open(fd)?,
            rlock: IoLock::new(),
            wlock: IoLock::new(),
            rtimeout: AtomicU64::new(0),
            wtimeout: AtomicU64::new(0),
            rdrained: AtomicU64::new(0),
            nonblocking: AtomicBool::new(false),
        })
    }

    /// Marks the socket closed and wakes its waiters (Go's pollDesc.evict),
    /// those parked on the poll slots and those waiting for a direction's
    /// lock; later operations fail with "use of closed network connection".
    pub(crate) fn close(&self) {
        self.pd.evict();
        // After `closing` is set (evict's SeqCst store): a locker that
        // checks it under the lock's queue lock either sees it or is found.
        self.rlock.close_waiters();
        self.wlock.close_waiters();
    }

    /// `Err(closed())` once `close` ran: for the operations that act on
    /// the socket without the retry loop (setters, shutdown, try_clone,
    /// into_std), which Go refuses with ErrNetClosing too (fd.incref).
    pub(crate) fn check_open(&self) -> io::Result<()> {
        if self.pd.is_closing() {
            Err(closed())
        } else {
            Ok(())
        }
    }

    /// Whether a goroutine is parked waiting for `mode` (tests only).
    pub(crate) fn parked(&self, mode: Mode) -> bool {
        self.pd.parked(mode)
    }

    /// Takes the socket's SO_RCVTIMEO and SO_SNDTIMEO as this handle's
    /// timeouts: a std socket converted in keeps the timeouts std set on
    /// it (its fd is non-blocking from now on, so the kernel no longer
    /// applies them). Errors are ignored (an fd that is not a socket has
    /// none; nothing checks the kind, as in std). Until h42 they were
    /// dropped: a read that timed out under std waited for ever here.
    pub(crate) fn adopt_timeouts(&self, s: &impl std::os::fd::AsFd) {
        let s = socket2::SockRef::from(s);
        if let Ok(t) = s.read_timeout() {
            let _ = self.set_timeout(Mode::Read, t);
        }
        if let Ok(t) = s.write_timeout() {
            let _ = self.set_timeout(Mode::Write, t);
        }
    }

    /// Sets this handle's timeouts as the socket's SO_RCVTIMEO and
    /// SO_SNDTIMEO (`None` clears them), for a socket converted out: the
    /// std socket then times out as this handle did (before h42 it kept
    /// whatever SO_RCVTIMEO held when it was converted in). A timeout
    /// under a microsecond is rounded up to one (zero would mean none).
    /// Errors are ignored, as in `adopt_timeouts`.
    pub(crate) fn hand_over_timeouts(&self, s: &impl std::os::fd::AsFd) {
        let s = socket2::SockRef::from(s);
        let us = |t: Option<Duration>| t.map(|d| d.max(Duration::from_micros(1)));
        let _ = s.set_read_timeout(us(self.timeout(Mode::Read)));
        let _ = s.set_write_timeout(us(self.timeout(Mode::Write)));
    }

    /// Sets std's non-blocking mode of this handle (see the field).
    pub(crate) fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// Whether std's non-blocking mode is on.
    pub(crate) fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    pub(crate) fn set_timeout(&self, mode: Mode, t: Option<Duration>) -> io::Result<()> {
        let ns = match t {
            None => 0,
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ))
            }
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1),
        };
        let a = match mode {
            Mode::Read => &self.rtimeout,
            Mode::Write => &self.wtimeout,
        };
        a.store(ns, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn timeout(&self, mode: Mode) -> Option<Duration> {
        let a = match mode {
            Mode::Read => &self.rtimeout,
            Mode::Write => &self.wtimeout,
        };
        match a.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Runs `op` until it does not report EAGAIN, waiting for readability
    /// between tries, bounded by the read timeout.
    pub(crate) fn read_io<R: Outcome>(&self, op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        self.io(Mode::Read, deadline(self.timeout(Mode::Read)), op)
    }

    /// A read from a TCP stream into `len` bytes (tokio's readiness
    /// clearing, which Go does not do): as `read_io`, but a read that
    /// returns fewer than `len` bytes (and more than 0) emptied the socket's
    /// receive queue, so the next read skips the syscall that would return
    /// EAGAIN and waits for the poller at once, unless a readable edge was
    /// harvested since (the descriptor's read tick moved). It cannot lose a
    /// wake-up: data that arrived after the short read raised an edge
    /// (the fd is registered edge-triggered), which netpoll harvests —
    /// bumping the tick, then readying the slot — before or after the wait
    /// begins, and either the tick check or the slot catches it. Saves one
    /// `recvfrom` per request in a request/response loop (HTTP keep-alive:
    /// 2 per request before, 1 after). TCP only: a Unix stream read may
    /// stop short at a credentials boundary with data left, which would
    /// then wait for an edge that never comes. After a hang-up or error
    /// (EPOLLRDHUP/HUP/ERR seen once, sticky) reads never skip: a short
    /// read may leave the EOF or error behind with its edge already spent.
    /// Known limit (tokio's too): a read that stops at a TCP urgent mark
    /// (the peer sent MSG_OOB data) also comes back short with data left;
    /// the rest is then read when the peer's next segment arrives.
    pub(crate) fn stream_read(
        &self,
        len: usize,
        mut op: impl FnMut() -> io::Result<usize>,
    ) -> io::Result<usize> {
        let hint = self.rdrained.load(Ordering::Relaxed);
        // The tick first, then the sticky hang-up flag: netpoll sets the
        // flag before it bumps the tick, so a hang-up harvested before the
        // tick we compare is seen here.
        let now = self.pd.tick(Mode::Read);
        let skip = len > 0 && hint == DRAINED | u64::from(now) && !self.pd.rclosed();
        let dl = deadline(self.timeout(Mode::Read));
        self.io_with(Mode::Read, dl, skip.then_some(now), || {
            // The tick before the syscall: an edge harvested during it
            // moves the tick past this value, so it is never hidden.
            let t = self.pd.tick(Mode::Read);
            let r = op();
            if let Ok(n) = r {
                if n > 0 && n < len {
                    self.rdrained
                        .store(DRAINED | u64::from(t), Ordering::Relaxed);
                }
            }
            r
        })
    }

    /// A datagram receive (UDP, Unix datagram): as `read_io`, but once
    /// the socket's receiving side is shut down (`shutdown(Read)`, seen as
    /// a read hang-up: `PollDesc::rdhup`), an empty queue ends the call
    /// with `eof()`, what std's blocking call returns there (its recv
    /// returns 0), instead of waiting. The non-blocking recv returns
    /// EAGAIN in that state, and the one edge the shutdown raised is
    /// spent: before h42 the call waited for a datagram (its timeout, or
    /// for ever; on a plain thread it spun in poll(2), which reports the
    /// shutdown at once), where std's returns, which is how std code
    /// stops a thread blocked in recv. Datagrams queued before or after
    /// the shutdown are still received first, as in std. No race: the
    /// flag is set before netpoll readies the waiter for the edge that
    /// the shutdown raises (or by a thread's own poll), and every retry
    /// after an EAGAIN reads it.
    pub(crate) fn dgram_read<R: Outcome>(
        &self,
        mut op: impl FnMut() -> io::Result<R>,
        eof: impl Fn() -> io::Result<R>,
    ) -> io::Result<R> {
        self.read_io(|| match op() {
            Err(e) if would_block(&e) && self.pd.rdhup() => eof(),
            r => r,
        })
    }

    /// Like `read_io`, for writability and the write timeout.
    pub(crate) fn write_io<R: Outcome>(&self, op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        self.io(Mode::Write, deadline(self.timeout(Mode::Write)), op)
    }

    /// The retry loop: `op` is a non-blocking syscall. Errors: `op`'s own,
    /// TimedOut once `deadline` (monotonic ns) passes, or the closed error.
    pub(crate) fn io<R: Outcome>(
        &self,
        mode: Mode,
        deadline: Option<i64>,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        self.io_with(mode, deadline, None, op)
    }

    /// [`NetFd::io`]. `skipped_at`: `Some(t)` skips the first try of `op`
    /// because a read under the poll descriptor's tick `t` drained the
    /// socket (`stream_read`); `None` tries `op` first. A skipped `op`
    /// still runs once before the operation may report `TimedOut`.
    ///
    /// Several waiters per direction (Go serialises them with fdMutex
    /// before the first syscall; goro only once one has to wait, so the
    /// common case takes no lock). The direction's lock admits one waiter
    /// to the poll slot at a time. A goroutine that got EAGAIN and then
    /// waited for the lock may find that the waiter before it consumed the
    /// readiness of an edge that also covers data for it (one edge for two
    /// datagrams, or for two connections in the accept queue): no new edge
    /// comes, and waiting on the slot would hang. So after taking the lock
    /// it retries `op` before waiting if an edge was harvested since its
    /// EAGAIN (the descriptor's tick for `mode` moved). If the tick did not
    /// move, any data that arrived after that EAGAIN has an edge not yet
    /// harvested, whose readiness can only reach this waiter: the slot is
    /// only waited on under the lock. The tick is read before the syscall;
    /// the socket lock the kernel takes and releases inside the syscall
    /// orders that load before the arrival of any data the syscall missed,
    /// hence before the harvest of its edge.
    ///
    /// The wait for the lock ends at `deadline` (`TimedOut`) or at
    /// `close`, as the wait on the slot does (iolock.rs): a timed operation
    /// queued behind one parked without a timeout does not wait for it.
    fn io_with<R: Outcome>(
        &self,
        mode: Mode,
        deadline: Option<i64>,
        skipped_at: Option<u32>,
        mut op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        // A check point, as at a channel operation: a goroutine pumping a
        // socket whose data is always ready never parks.
        crate::park::preempt_check();
        if self.pd.is_closing() {
            return Err(closed());
        }
        if self.is_nonblocking() {
            // std's non-blocking mode: one try (a skipped read's too),
            // EAGAIN being the caller's `WouldBlock`; no wait, no lock,
            // no timeout (std's SO_RCVTIMEO does not apply either).
            return self.settle(try_op(&mut op));
        }
        let tick = match skipped_at {
            Some(t) => t,
            None => {
                let t = self.pd.tick(mode);
                match try_op(&mut op) {
                    Err(e) if would_block(&e) => {}
                    r => return self.settle(r),
                }
                t
            }
        };
        let lock = match mode {
            Mode::Read => &self.rlock,
            Mode::Write => &self.wlock,
        };
        // The wait for the lock is bounded by the deadline and ended by
        // `close`, as the wait on the slot is: a timed read queued behind
        // a read parked without a timeout times out on its own.
        let _guard = match lock.lock(deadline, self.pd) {
            Ok(g) => g,
            Err(Stop::Closed) => return Err(closed()),
            Err(Stop::TimedOut) => {
                if self.pd.is_closing() {
                    return Err(closed());
                }
                // A skipped read owes its syscall (see `tried` below); it
                // needs no lock.
                if skipped_at.is_some() {
                    match try_op(&mut op) {
                        Err(e) if would_block(&e) => {}
                        r => return self.settle(r),
                    }
                }
                return Err(timed_out());
            }
        };
        let mut try_now = self.pd.tick(mode) != tick;
        // Whether `op` ran: a skipped read owes its syscall before it may
        // time out, as a per-operation timeout (std's SO_RCVTIMEO) returns
        // data that is already there. Timing out untried, a loop retrying
        // on `TimedOut` with a timeout shorter than the way here never
        // parked, so nothing harvested the edge that would end the skip:
        // it spun with the data in the socket.
        let mut tried = skipped_at.is_none();
        loop {
            if self.pd.is_closing() {
                return Err(closed());
            }
            if try_now {
                self.pd.consume_ready(mode);
            } else if deadline.is_some_and(|d| d <= crate::os::nanotime()) {
                if tried {
                    return Err(timed_out());
                }
            } else {
                self.pd.wait(mode, deadline);
                if self.pd.is_closing() {
                    return Err(closed());
                }
            }
            try_now = false;
            tried = true;
            match try_op(&mut op) {
                Err(e) if would_block(&e) => {}
                r => return self.settle(r),
            }
        }
    }

    /// `op`'s final result, unless a `close()` raced it. `close()` marks
    /// the descriptor closing, then shuts the socket down (so that the
    /// peer sees the end at once, as after Go's Close); an operation that
    /// passed its closing check just before would report what the
    /// shutdown made of its syscall: a read of 0 (EOF), a write's EPIPE,
    /// accept's EINVAL. Go reports the closed error for an operation that
    /// races Close (it never shuts down: its fd stays open until the last
    /// operation leaves), and so does this: a result that moved no data,
    /// or an error, is the closed error if the descriptor is closing. A
    /// result that moved data stands. The closing flag is stored before
    /// the shutdown and the kernel's socket lock orders that shutdown
    /// before the syscall that saw it, so the load here sees the flag.
    fn settle<R: Outcome>(&self, r: io::Result<R>) -> io::Result<R> {
        match &r {
            Ok(v) if !v.moved_nothing() => r,
            _ if self.pd.is_closing() => Err(closed()),
            _ => r,
        }
    }
}

/// The success of a socket operation, as [`NetFd::settle`] judges it.
pub(crate) trait Outcome {
    /// Whether the operation moved no data: a read of 0 is the EOF a
    /// racing `close()`'s shutdown makes.
    fn moved_nothing(&self) -> bool {
        false
    }
}

/// Bytes read or written.
impl Outcome for usize {
    fn moved_nothing(&self) -> bool {
        *self == 0
    }
}

/// Bytes and an address (recv_from, peek_from).
impl<A> Outcome for (usize, A) {
    fn moved_nothing(&self) -> bool {
        self.0 == 0
    }
}

/// An accepted fd and its peer's address (TCP accept).
impl Outcome for (RawFd, socket2::SockAddr) {}

/// An accepted Unix stream and its peer's address.
impl Outcome
    for (
        std::os::unix::net::UnixStream,
        std::os::unix::net::SocketAddr,
    )
{
}

/// A completed connect.
impl Outcome for () {}

/// Runs the non-blocking syscall `op`, again at once while it fails with
/// `Interrupted` (EINTR), as Go's ignoringEINTR / ignoringEINTRIO do: a
/// signal cut the call short, which says nothing about readiness. (Until
/// h33 EINTR was taken for EAGAIN: the operation tried again only after
/// the next edge or its deadline, and with neither coming it waited for
/// ever.)
fn try_op<R>(op: &mut impl FnMut() -> io::Result<R>) -> io::Result<R> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Whether `op` must wait for readiness before it is tried again (EAGAIN).
fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Drop for NetFd {
    fn drop(&mut self) {
        self.pd.free();
    }
}

/// `send(2)` with MSG_NOSIGNAL: a peer that went away is EPIPE on this
/// socket, never SIGPIPE for the process.
pub(crate) fn send_nosignal(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is a valid readable buffer of buf.len() bytes.
    let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(crate::os::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `sendmsg(2)` of `bufs` with MSG_NOSIGNAL (a `writev` that cannot raise
/// SIGPIPE). At most IOV_MAX (1,024) buffers per call: a short count, as
/// `Write::write_vectored` allows.
pub(crate) fn sendmsg_nosignal(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix (std guarantees it).
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(1024) as _;
    // SAFETY: msg points at bufs.len() (capped) valid iovecs, which
    // sendmsg only reads.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(crate::os::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `readv(2)` into `bufs` (at most IOV_MAX, 1,024, buffers per call).
pub(crate) fn readv(fd: RawFd, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
    // SAFETY: IoSliceMut is ABI-compatible with iovec on Unix; each is a
    // valid writable buffer, and the count is capped at the slice length.
    let r = unsafe {
        libc::readv(
            fd,
            bufs.as_mut_ptr() as *const libc::iovec,
            bufs.len().min(1024) as libc::c_int,
        )
    };
    if r < 0 {
        Err(crate::os::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Resolves `addr` inside `goro::blocking` (getaddrinfo blocks the thread).
pub(crate) fn resolve<A: std::net::ToSocketAddrs>(
    addr: A,
) -> io::Result<Vec<std::net::SocketAddr>> {
    let v: Vec<_> = crate::blocking(|| addr.to_socket_addrs())?.collect();
    if v.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A try that fails with `Interrupted` (EINTR) is run again at once,
    /// not taken for EAGAIN. No socket call can be made to return EINTR on
    /// demand (a non-blocking one never sleeps, so a signal finds none in
    /// progress), so the syscall here is a stand-in that fails once with
    /// it, on a socket with nothing to read, and then succeeds unless it
    /// is retried only after the 10 s deadline, i.e. after waiting for
    /// readiness that never came (before h33: `Err(TimedOut)` after 10 s,
    /// with two tries).
    #[test]
    fn interrupted_is_retried_at_once() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let fd = NetFd::new(a.as_raw_fd()).unwrap();
        let dl = deadline(Some(Duration::from_secs(10)));
        let mut tries = 0;
        let r = fd.io(Mode::Read, dl, || {
            tries += 1;
            if tries == 1 {
                Err(io::ErrorKind::Interrupted.into())
            } else if dl.is_some_and(|d| crate::os::nanotime() >= d) {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(7usize)
            }
        });
        assert_eq!(r.map_err(|e| e.kind()), Ok(7));
        assert_eq!(tries, 2);
    }
}
