//! `NetFd`: a non-blocking socket registered with the netpoller, and the
//! retry loop every `goro::net` operation goes through (Go's internal/poll
//! FD: try the syscall; on EAGAIN wait on the poll descriptor; retry).

use crate::netpoll::{Mode, PollDesc};
use core::sync::atomic::{AtomicU64, Ordering};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A registered socket's poller state. Does not own the fd: the std socket
/// declared after it in each `goro::net` type does, so the descriptor is
/// deregistered (dropped first) before the fd is closed.
pub(crate) struct NetFd {
    pd: &'static PollDesc,
    /// One waiter per direction (Go's fdMutex read/write locks): taken only
    /// when an operation has to wait.
    rlock: crate::sync::Mutex<()>,
    wlock: crate::sync::Mutex<()>,
    /// Per-operation timeouts in ns, 0 = none. Relaxed: a plain setting,
    /// read at the start of each operation.
    rtimeout: AtomicU64,
    wtimeout: AtomicU64,
}

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
            rlock: crate::sync::Mutex::new(()),
            wlock: crate::sync::Mutex::new(()),
            rtimeout: AtomicU64::new(0),
            wtimeout: AtomicU64::new(0),
        })
    }

    /// Marks the socket closed and wakes its waiters (Go's pollDesc.evict);
    /// later operations fail with "use of closed network connection".
    pub(crate) fn close(&self) {
        self.pd.evict();
    }

    /// Whether a goroutine is parked waiting for `mode` (tests only).
    pub(crate) fn parked(&self, mode: Mode) -> bool {
        self.pd.parked(mode)
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
    pub(crate) fn read_io<R>(&self, op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        self.io(Mode::Read, deadline(self.timeout(Mode::Read)), op)
    }

    /// Like `read_io`, for writability and the write timeout.
    pub(crate) fn write_io<R>(&self, op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        self.io(Mode::Write, deadline(self.timeout(Mode::Write)), op)
    }

    /// The retry loop: `op` is a non-blocking syscall. Errors: `op`'s own,
    /// TimedOut once `deadline` (monotonic ns) passes, or the closed error.
    pub(crate) fn io<R>(
        &self,
        mode: Mode,
        deadline: Option<i64>,
        mut op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        if self.pd.is_closing() {
            return Err(closed());
        }
        match op() {
            Err(e) if retry(&e) => {}
            r => return r,
        }
        let _guard = match mode {
            Mode::Read => self.rlock.lock(),
            Mode::Write => self.wlock.lock(),
        };
        loop {
            if self.pd.is_closing() {
                return Err(closed());
            }
            if deadline.is_some_and(|d| d <= crate::os::nanotime()) {
                return Err(timed_out());
            }
            self.pd.wait(mode, deadline);
            if self.pd.is_closing() {
                return Err(closed());
            }
            match op() {
                Err(e) if retry(&e) => {}
                r => return r,
            }
        }
    }
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
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
        Err(io::Error::last_os_error())
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
