//! `goro::net`: TCP, UDP and Unix-domain sockets whose blocking operations
//! park the calling goroutine on the runtime's netpoller (Go's net package
//! over internal/poll), with std's shapes and method names.
//!
//! Every socket is non-blocking underneath and registered once with the
//! runtime's epoll instance (edge-triggered). An operation tries its
//! syscall; on EAGAIN the goroutine parks until epoll reports readiness,
//! and its OS thread runs other goroutines meanwhile. Called outside a
//! goroutine (a plain thread, or inside [`crate::blocking`]) the same
//! operations block the thread in poll(2) instead.
//!
//! Differences from std worth knowing:
//! - Timeouts (`set_read_timeout`, …) are per socket object (not shared by
//!   `try_clone`d handles) and expire with `ErrorKind::TimedOut`; so is
//!   std's non-blocking mode (`set_nonblocking`).
//! - `close(&self)` (Go's `Conn.Close`) wakes goroutines blocked on the
//!   socket; they and later operations fail with `NotConnected` ("use of
//!   closed network connection"). The fd itself is closed when the value
//!   is dropped.
//! - Writes use `MSG_NOSIGNAL`: a vanished peer is `BrokenPipe` on that
//!   socket, never SIGPIPE.
//! - Host names are resolved inside [`crate::blocking`].
//! - Conversions in (`TryFrom<std type>`, `From<OwnedFd>`, `FromRawFd`)
//!   make the socket non-blocking and register it with the poller; out
//!   (`into_std`, `IntoRawFd`, `From<T> for OwnedFd`) deregister it and
//!   make it blocking again. The mode is the socket's, shared by every
//!   dup'd (`try_clone`d) handle.
//!
//! See docs/NET.md for the poller's design.

mod fd;
mod iolock;
pub(crate) mod splice;
mod tcp;
mod udp;
mod unix;

pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixDatagram, UnixIncoming, UnixListener, UnixStream};

pub use std::net::{Shutdown, SocketAddr, ToSocketAddrs};

/// Conversions from and to std and raw fds for a socket type `$t { fd:
/// NetFd, inner: $std }`: `into_std`, `FromRawFd`, `IntoRawFd`,
/// `From<OwnedFd>`, `From<$t> for OwnedFd`, and (unless asked `without
/// TryFrom`: `TcpStream`, whose infallible `From<std::net::TcpStream>`
/// predates the macro and rules a `TryFrom` out) `TryFrom<$std>`, which is
/// also how each type wraps a fresh std socket.
///
/// Every way in goes through `$t::try_from($std)` (non-blocking, then
/// `NetFd::new` registers it); every way out through `into_std`
/// (deregister, then blocking). The fd conversions cannot return an error:
/// they panic where `try_from` or `into_std` would fail, as
/// `From<std::net::TcpStream>` does.
macro_rules! std_conversions {
    ($t:ident, $std:ty) => {
        std_conversions!($t, $std, without TryFrom);

        impl TryFrom<$std> for $t {
            type Error = std::io::Error;
            /// Takes over a std socket: makes it non-blocking and registers
            /// it with the poller; its timeouts (SO_RCVTIMEO, SO_SNDTIMEO,
            /// std's `set_read_timeout`) become this handle's. Errors:
            /// fcntl's or epoll_ctl's (resource exhaustion).
            ///
            /// The non-blocking mode belongs to the socket, not the handle:
            /// std handles cloned from it (`try_clone`, dup) become
            /// non-blocking too and return `WouldBlock` where they blocked.
            fn try_from(inner: $std) -> std::io::Result<$t> {
                let t = $t::wrap(inner)?;
                t.fd.adopt_timeouts(&t.inner);
                Ok(t)
            }
        }

        impl $t {
            /// A fresh socket of ours (bind, accept, connect, pair,
            /// try_clone): non-blocking, then registered. Unlike
            /// `try_from`, takes no timeouts from the socket (it has none
            /// of the user's), which saves two getsockopt calls.
            fn wrap(inner: $std) -> std::io::Result<$t> {
                inner.set_nonblocking(true)?;
                Ok($t {
                    fd: super::fd::NetFd::new(std::os::fd::AsRawFd::as_raw_fd(&inner))?,
                    inner,
                })
            }
        }
    };
    ($t:ident, $std:ty, without TryFrom) => {
        impl $t {
            /// Deregisters the socket and returns it as a blocking std
            /// socket (non-blocking if `set_nonblocking(true)` was called
            /// on this handle, as a std socket keeps its mode), with this
            /// handle's read and write timeouts as its SO_RCVTIMEO and
            /// SO_SNDTIMEO (`None` clears them), as std's timeouts stay
            /// with a socket across conversions. Never blocks. Errors: fcntl's, if the blocking mode
            /// cannot be restored (not for an open fd). No Go counterpart
            /// (Go's `File()` returns a dup instead).
            ///
            /// The blocking mode belongs to the socket, not the handle: goro
            /// handles made from this one with `try_clone` (dup) become
            /// blocking too, so a goroutine using one then blocks its thread
            /// and its timeouts stop applying. Convert the last handle, or
            /// move every clone to std.
            pub fn into_std(self) -> std::io::Result<$std> {
                self.fd.check_open()?;
                // std's mode as the user set it (`set_nonblocking`), which
                // a std socket keeps; blocking unless asked.
                let nonblocking = self.fd.is_nonblocking();
                let $t { fd, inner } = self;
                fd.hand_over_timeouts(&inner);
                drop(fd);
                inner.set_nonblocking(nonblocking)?;
                Ok(inner)
            }
        }

        impl std::os::fd::FromRawFd for $t {
            #[doc = concat!(
                "Takes ownership of `fd` (std's `", stringify!($std), "::from_raw_fd`): makes it"
            )]
            /// non-blocking and registers it with the poller, as
            /// `From<OwnedFd>`.
            ///
            /// # Safety
            ///
            #[doc = concat!(
                "As std's: `fd` must be an open socket of the kind `", stringify!($std), "`"
            )]
            /// wraps, owned by the caller, who must not use or close it
            /// afterwards (the returned value closes it when dropped).
            ///
            /// # Panics
            ///
            /// If the socket cannot be made non-blocking or registered with
            /// the poller (epoll_ctl ENOMEM/ENOSPC: resource exhaustion;
            /// EPERM if `fd` is not pollable, which the contract rules out).
            /// The fd is closed before the panic.
            unsafe fn from_raw_fd(fd: std::os::fd::RawFd) -> $t {
                // SAFETY: the caller guarantees that `fd` is open and ours to
                // own (this function's contract is OwnedFd::from_raw_fd's).
                let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
                $t::from(owned)
            }
        }

        impl From<std::os::fd::OwnedFd> for $t {
            #[doc = concat!(
                "Takes over an owned socket fd (std's `From<OwnedFd> for ", stringify!($std), "`):"
            )]
            /// makes it non-blocking and registers it with the poller, as
            /// the conversion from the std type does. As in std, nothing checks
            /// that the fd is a socket of the right kind: if it is not,
            /// operations fail with the kernel's errors (e.g. `ENOTSOCK`).
            ///
            /// The non-blocking mode belongs to the socket, not the fd:
            /// other fds for the same socket (dup, `try_clone`) become
            /// non-blocking too and return `WouldBlock` where they blocked.
            ///
            /// # Panics
            ///
            /// If the socket cannot be made non-blocking or registered with
            /// the poller (epoll_ctl ENOMEM/ENOSPC: resource exhaustion;
            /// EPERM for an fd with no poll support, such as a regular
            /// file). The fd is closed before the panic.
            fn from(fd: std::os::fd::OwnedFd) -> $t {
                $t::try_from(<$std>::from(fd)).unwrap_or_else(|e| {
                    panic!(concat!("goro::net::", stringify!($t), "::from(OwnedFd): {}"), e)
                })
            }
        }

        impl std::os::fd::IntoRawFd for $t {
            #[doc = concat!(
                "Gives up the socket (std's `", stringify!($std), "::into_raw_fd`): deregisters it"
            )]
            /// from the poller and returns its fd in blocking mode, open
            /// and owned by the caller, as [`into_std`] does.
            ///
            /// The blocking mode belongs to the socket, not the fd: goro
            /// handles made from this one with `try_clone` become blocking
            /// too (their goroutines then block their threads, and their
            /// timeouts stop applying). Convert the last handle.
            ///
            /// # Panics
            ///
            /// If the blocking mode cannot be restored (that fails only for
            /// a closed fd, which a live socket's is not). The fd is closed
            /// before the panic.
            ///
            #[doc = concat!("[`into_std`]: ", stringify!($t), "::into_std")]
            fn into_raw_fd(self) -> std::os::fd::RawFd {
                std::os::fd::IntoRawFd::into_raw_fd(std::os::fd::OwnedFd::from(self))
            }
        }

        impl From<$t> for std::os::fd::OwnedFd {
            #[doc = concat!(
                "Gives up the socket (std's `From<", stringify!($std), "> for OwnedFd`): deregisters"
            )]
            /// it from the poller and returns its fd in blocking mode, as
            #[doc = concat!("[`", stringify!($t), "::into_std`] does.")]
            ///
            /// The blocking mode belongs to the socket, not the fd: goro
            /// handles made from this one with `try_clone` become blocking
            /// too. Convert the last handle.
            ///
            /// # Panics
            ///
            /// If the blocking mode cannot be restored (as `IntoRawFd`).
            /// The fd is closed before the panic.
            fn from(s: $t) -> std::os::fd::OwnedFd {
                let inner = s.into_std().unwrap_or_else(|e| {
                    panic!(concat!("goro::net::", stringify!($t), "::into OwnedFd: {}"), e)
                });
                std::os::fd::OwnedFd::from(inner)
            }
        }
    };
}
use std_conversions;

/// The methods every goro socket shares: timeouts, close, raw fd access.
macro_rules! common_socket_methods {
    ($t:ty) => {
        impl $t {
            /// Sets the timeout of each read-side operation (std's
            /// `set_read_timeout`; Go's SetReadDeadline relative to each
            /// call). `None` waits forever. An operation that waits longer
            /// fails with `ErrorKind::TimedOut`. ns resolution; a duration
            /// too large to add to the clock (about 292 years) waits
            /// forever. Never blocks. Errors: `InvalidInput` for a zero
            /// duration.
            pub fn set_read_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
                self.fd.check_open()?;
                self.fd.set_timeout(crate::netpoll::Mode::Read, t)
            }

            /// Sets the timeout of each write-side operation (std's
            /// `set_write_timeout`; Go's SetWriteDeadline relative to each
            /// call), as `set_read_timeout` does for reads. `None` waits
            /// forever. Never blocks. Errors: `InvalidInput` for a zero
            /// duration.
            pub fn set_write_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
                self.fd.check_open()?;
                self.fd.set_timeout(crate::netpoll::Mode::Write, t)
            }

            /// std's `set_nonblocking`: while on, an operation that would
            /// wait (read, write, accept, recv, send, peek) returns
            /// `ErrorKind::WouldBlock` at once instead of parking the
            /// goroutine (or blocking the thread), and the timeouts do not
            /// apply, as in std. Off by default. The socket is always
            /// non-blocking underneath; this mode is the handle's, not
            /// shared with `try_clone` handles (in std it is the socket's),
            /// and `into_std` (and `IntoRawFd`) keeps it. No Go
            /// counterpart (Go polls with a past deadline). Never blocks.
            /// Errors: the closed error after `close`.
            pub fn set_nonblocking(&self, nonblocking: bool) -> std::io::Result<()> {
                self.fd.check_open()?;
                self.fd.set_nonblocking(nonblocking);
                Ok(())
            }

            /// The read timeout (`None`: none). Never blocks and never
            /// fails (`io::Result` for std's signature). No Go counterpart
            /// (Go's deadlines cannot be read back).
            pub fn read_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok(self.fd.timeout(crate::netpoll::Mode::Read))
            }

            /// The write timeout (`None`: none). Never blocks and never
            /// fails (`io::Result` for std's signature). No Go counterpart.
            pub fn write_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok(self.fd.timeout(crate::netpoll::Mode::Write))
            }

            /// Go's `Close` while others may be using the socket: wakes every
            /// goroutine or thread-free waiter blocked on it with a
            /// `NotConnected` "use of closed network connection" error, and
            /// makes later operations fail the same way: reads, writes,
            /// accepts, the setters, `shutdown`, `try_clone` and `into_std`
            /// (Go's fd.incref refuses them all); the getters (`local_addr`,
            /// `ttl`, the timeouts) still answer. An operation racing the
            /// close gets the same error. Does not block.
            /// The fd is released when the value is dropped (so it cannot be
            /// reused under a waiter). Threads blocked in poll(2) on a
            /// stream socket are woken by a shutdown issued here as well;
            /// that shutdown acts on the socket, so handles made with
            /// `try_clone` see its end too (a read gives `Ok(0)`), where a
            /// Go dup (`File()`) survives `Close`.
            pub fn close(&self) {
                self.fd.close();
                // SAFETY: shutdown on our own open fd; errors (ENOTCONN for
                // unconnected sockets) are irrelevant here.
                unsafe {
                    libc::shutdown(
                        std::os::fd::AsRawFd::as_raw_fd(&self.inner),
                        libc::SHUT_RDWR,
                    )
                };
            }

            /// Test hook: whether a goroutine is parked on this socket
            /// waiting to read (`write = false`) or write. Not public API.
            #[doc(hidden)]
            pub fn __parked(&self, write: bool) -> bool {
                self.fd.parked(if write {
                    crate::netpoll::Mode::Write
                } else {
                    crate::netpoll::Mode::Read
                })
            }

            /// Gets and clears the socket's pending error (SO_ERROR). Never
            /// blocks. Errors: getsockopt's. No Go counterpart (Go reads
            /// SO_ERROR only inside Dial).
            pub fn take_error(&self) -> std::io::Result<Option<std::io::Error>> {
                self.inner.take_error()
            }
        }

        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(&self.inner)
            }
        }

        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(&self.inner)
            }
        }
    };
}
use common_socket_methods;

/// Read/Write for `T` and `&T` via `fn read_impl` / `fn write_impl`.
macro_rules! stream_io {
    ($t:ty) => {
        impl $t {
            /// The poll state and the fd, for the kernel-side copy
            /// (splice.rs).
            pub(super) fn poll_fd(&self) -> (&super::fd::NetFd, std::os::fd::RawFd) {
                (&self.fd, std::os::fd::AsRawFd::as_raw_fd(&self.inner))
            }

            /// readv(2), parking until readable.
            fn read_vectored_impl(
                &self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&self.inner);
                self.fd.read_io(|| super::fd::readv(fd, bufs))
            }

            /// sendmsg(2) with MSG_NOSIGNAL (writev without SIGPIPE),
            /// parking until writable.
            fn write_vectored_impl(&self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&self.inner);
                self.fd.write_io(|| super::fd::sendmsg_nosignal(fd, bufs))
            }
        }
        impl std::io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.read_impl(buf)
            }
            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                self.read_vectored_impl(bufs)
            }
        }
        impl std::io::Read for &$t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.read_impl(buf)
            }
            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                self.read_vectored_impl(bufs)
            }
        }
        impl std::io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.write_impl(buf)
            }
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                self.write_vectored_impl(bufs)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl std::io::Write for &$t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.write_impl(buf)
            }
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                self.write_vectored_impl(bufs)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
    };
}
use stream_io;

/// Whether an accept error is a resource shortage a server should wait
/// out (Go's http.Server retries "temporary" accept errors with backoff).
fn accept_temporary(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Temporary accept errors waited out by `incoming()` (only grows).
/// Relaxed: a counter (test hook below).
static ACCEPT_BACKOFFS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Test hook: how many times an `incoming()` loop has backed off after a
/// temporary accept error (EMFILE, ...). Not public API.
#[doc(hidden)]
pub fn __accept_backoffs() -> u64 {
    ACCEPT_BACKOFFS.load(core::sync::atomic::Ordering::Relaxed)
}

/// The hardened accept loop behind every listener's `incoming()`
/// (`TcpListener`, `UnixListener`), shaped like Go's http.Server.Serve:
/// temporary resource errors (see `accept_temporary`) are logged once per
/// process to stderr and waited out with a backoff that parks the
/// goroutine for 5 ms, doubling up to 1 s, and resets after a success;
/// ECONNABORTED (the peer gave up while queued) is skipped; any other error
/// is returned to the caller.
struct AcceptLoop {
    /// The last backoff; zero after a success.
    backoff: std::time::Duration,
}

impl AcceptLoop {
    fn new() -> AcceptLoop {
        AcceptLoop {
            backoff: std::time::Duration::ZERO,
        }
    }

    /// Calls `accept` until it yields a connection or an error that is
    /// neither temporary nor ECONNABORTED. Blocking: parks in `accept` and
    /// in the backoff sleeps (a plain thread blocks in both).
    fn next<S, A>(
        &mut self,
        mut accept: impl FnMut() -> std::io::Result<(S, A)>,
    ) -> std::io::Result<S> {
        loop {
            match accept() {
                Ok((s, _)) => {
                    self.backoff = std::time::Duration::ZERO;
                    return Ok(s);
                }
                Err(e) if accept_temporary(&e) => self.wait(&e),
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Logs the first temporary error of the process, counts it and parks
    /// for the next backoff step.
    fn wait(&mut self, e: &std::io::Error) {
        static LOGGED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
        // Relaxed: a log-once flag; a duplicate line under a race is harmless.
        if !LOGGED.swap(true, core::sync::atomic::Ordering::Relaxed) {
            eprintln!("goro::net: accept error: {e}; retrying with backoff (logged once)");
        }
        // Relaxed: a statistic.
        ACCEPT_BACKOFFS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        self.backoff = if self.backoff.is_zero() {
            std::time::Duration::from_millis(5)
        } else {
            (self.backoff * 2).min(std::time::Duration::from_secs(1))
        };
        crate::time::sleep(self.backoff);
    }
}
