//! Unix-domain sockets: `UnixListener`, `UnixStream`, `UnixDatagram`
//! (Go's net.UnixListener / net.UnixConn).

use super::fd::{send_nosignal, NetFd};
use super::{common_socket_methods, std_conversions, stream_io, AcceptLoop};
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::SocketAddr;
use std::path::Path;

/// A Unix stream socket server (std's `UnixListener` shape). `accept`
/// parks until a connection arrives.
pub struct UnixListener {
    fd: NetFd,
    inner: std::os::unix::net::UnixListener,
}

impl UnixListener {
    /// Binds and listens on the filesystem `path` (which must not exist).
    /// Errors: bind's (e.g. `AddrInUse`).
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        UnixListener::wrap(std::os::unix::net::UnixListener::bind(path)?)
    }

    /// Binds and listens on `addr` (std's `bind_addr`): a path, or an
    /// abstract name (Linux: `SocketAddrExt::from_abstract_name`), which
    /// needs no file. Never blocks. Errors: bind's (e.g. `AddrInUse`) or
    /// the poller's registration. No Go counterpart (Go's "@name").
    pub fn bind_addr(addr: &SocketAddr) -> io::Result<UnixListener> {
        UnixListener::wrap(std::os::unix::net::UnixListener::bind_addr(addr)?)
    }

    /// Accepts a connection; parks until one arrives. Errors: accept's,
    /// the read timeout, or the closed error.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, a) = self.fd.read_io(|| self.inner.accept())?;
        Ok((UnixStream::wrap(s)?, a))
    }

    /// Endless iterator of accepted streams with the same EMFILE backoff
    /// as [`super::TcpListener::incoming`].
    pub fn incoming(&self) -> UnixIncoming<'_> {
        UnixIncoming {
            l: self,
            accept: AcceptLoop::new(),
        }
    }

    /// The bound address: Go's `Listener.Addr`. Never blocks. Errors:
    /// getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// A second handle to the same socket (dup), registered separately.
    /// Never blocks. Errors:
    /// dup's (`EMFILE`) or the poller's registration (resource
    /// exhaustion). No Go counterpart.
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        self.fd.check_open()?;
        UnixListener::wrap(self.inner.try_clone()?)
    }
}

common_socket_methods!(UnixListener);
std_conversions!(UnixListener, std::os::unix::net::UnixListener);

/// Iterator returned by [`UnixListener::incoming`]; never returns `None`.
pub struct UnixIncoming<'a> {
    l: &'a UnixListener,
    accept: AcceptLoop,
}

impl Iterator for UnixIncoming<'_> {
    type Item = io::Result<UnixStream>;
    fn next(&mut self) -> Option<io::Result<UnixStream>> {
        Some(self.accept.next(|| self.l.accept()))
    }
}

/// A Unix stream connection (std's `UnixStream` shape); `Read`/`Write` on
/// `UnixStream` and `&UnixStream` park the goroutine until ready.
pub struct UnixStream {
    fd: NetFd,
    inner: std::os::unix::net::UnixStream,
}

impl UnixStream {
    /// Connects to the socket at `path`. A Unix connect completes at once
    /// or fails (it only blocks while the listener's backlog is full), so
    /// it runs inside `blocking`. Errors: connect's (e.g. `NotFound`,
    /// `ConnectionRefused`).
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        let s = crate::blocking(|| std::os::unix::net::UnixStream::connect(path))?;
        UnixStream::wrap(s)
    }

    /// Connects to the socket at `addr` (std's `connect_addr`): a path or
    /// an abstract name. Runs inside `blocking`, as `connect`. Errors:
    /// connect's (e.g. `ConnectionRefused`).
    pub fn connect_addr(addr: &SocketAddr) -> io::Result<UnixStream> {
        let s = crate::blocking(|| std::os::unix::net::UnixStream::connect_addr(addr))?;
        UnixStream::wrap(s)
    }

    /// A connected pair (socketpair(2)). Never blocks. Errors:
    /// socketpair's (`EMFILE`) or the poller's registration. No Go
    /// counterpart in net (`syscall.Socketpair` and `net.FileConn`).
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::wrap(a)?, UnixStream::wrap(b)?))
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.read_io(|| (&self.inner).read(buf))
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        self.fd.write_io(|| send_nosignal(fd, buf))
    }

    /// The local address (unnamed for a connecting end): Go's
    /// `Conn.LocalAddr`. Never blocks. Errors: getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The peer's address: Go's `Conn.RemoteAddr`. Never blocks. Errors:
    /// getpeername's (`NotConnected`).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down one or both halves; the peer reads EOF after `Write`.
    /// Go's `UnixConn.CloseRead`/`CloseWrite`. Never blocks. Errors:
    /// shutdown's (`NotConnected`).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.shutdown(how)
    }

    /// A second handle to the same connection (dup), registered separately;
    /// timeouts are not copied. Never blocks. Errors: dup's (`EMFILE`) or the
    /// poller's registration (resource exhaustion). No Go counterpart.
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        self.fd.check_open()?;
        UnixStream::wrap(self.inner.try_clone()?)
    }
}

common_socket_methods!(UnixStream);
std_conversions!(UnixStream, std::os::unix::net::UnixStream);
stream_io!(UnixStream);

/// A Unix datagram socket (std's `UnixDatagram` shape). Receives park
/// until a datagram arrives.
pub struct UnixDatagram {
    fd: NetFd,
    inner: std::os::unix::net::UnixDatagram,
}

impl UnixDatagram {
    /// Binds to the filesystem `path` (which must not exist): Go's
    /// `net.ListenUnixgram`. Never blocks. Errors: bind's (e.g. `AddrInUse`,
    /// `NotFound` for a missing directory) or the poller's registration.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(std::os::unix::net::UnixDatagram::bind(path)?)
    }

    /// Binds to `addr` (std's `bind_addr`): a path or an abstract name.
    /// Never blocks. Errors: bind's or the poller's registration.
    pub fn bind_addr(addr: &SocketAddr) -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(std::os::unix::net::UnixDatagram::bind_addr(addr)?)
    }

    /// An unbound socket (it can still `send_to`). Never blocks. Errors:
    /// socket's (`EMFILE`) or the poller's registration. No Go counterpart.
    pub fn unbound() -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(std::os::unix::net::UnixDatagram::unbound()?)
    }

    /// A connected pair (socketpair(2)). Never blocks. Errors:
    /// socketpair's (`EMFILE`) or the poller's registration. No Go
    /// counterpart in net (`syscall.Socketpair` and `net.FileConn`).
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
        Ok((UnixDatagram::wrap(a)?, UnixDatagram::wrap(b)?))
    }

    /// Sets the default peer for `send`/`recv`: Go's
    /// `net.DialUnix("unixgram", ...)`. Never blocks. Errors: connect's
    /// (e.g. `NotFound`, `ConnectionRefused`).
    pub fn connect<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.connect(path)
    }

    /// Sets the default peer to `addr` (std's `connect_addr`): a path or
    /// an abstract name. Never blocks. Errors: connect's.
    pub fn connect_addr(&self, addr: &SocketAddr) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.connect_addr(addr)
    }

    /// Sends one datagram to `addr` (std's `send_to_addr`): a path or an
    /// abstract name; parks while the peer's queue is full. Returns the
    /// bytes sent. Errors: as `send_to`.
    pub fn send_to_addr(&self, buf: &[u8], addr: &SocketAddr) -> io::Result<usize> {
        self.fd.write_io(|| self.inner.send_to_addr(buf, addr))
    }

    /// Sends one datagram to `path`; parks while the peer's queue is full.
    /// Returns the bytes sent. Errors: sendto's (e.g. `NotFound`,
    /// `ConnectionRefused`), the write timeout, or the closed error. Go's
    /// `UnixConn.WriteTo`.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        let p = path.as_ref();
        self.fd.write_io(|| self.inner.send_to(buf, p))
    }

    /// Sends one datagram to the connected peer; parks while the peer's
    /// queue is full. Returns the bytes sent. Errors: send's
    /// (`NotConnected` without `connect`, `ConnectionRefused` once the
    /// peer is gone), the write timeout, or the closed error. Go's
    /// `UnixConn.Write`.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        self.fd.write_io(|| send_nosignal(fd, buf))
    }

    /// Receives one datagram and its source; parks until one arrives. A
    /// datagram longer than `buf` is truncated. Once `shutdown(Read)` ran
    /// and nothing is queued, returns `Ok((0, unnamed))` at once, as std's.
    /// Errors: recvfrom's, the read timeout, or the closed error. Go's
    /// `UnixConn.ReadFrom`.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.fd.dgram_read(
            || self.inner.recv_from(buf),
            // After `shutdown(Read)` with nothing queued (`dgram_read`):
            // std's result, 0 bytes from no address, which std reports as
            // unnamed. An unbound socket's own address is the only way to
            // make an unnamed `SocketAddr` (std has no constructor); this
            // path is rare.
            || {
                Ok((
                    0,
                    std::os::unix::net::UnixDatagram::unbound()?.local_addr()?,
                ))
            },
        )
    }

    /// Receives one datagram; parks until one arrives. A datagram longer
    /// than `buf` is truncated. Once `shutdown(Read)` ran and nothing is
    /// queued, returns `Ok(0)` at once, as std's. Errors: recv's, the read
    /// timeout, or the closed error. Go's `UnixConn.Read`.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.dgram_read(|| self.inner.recv(buf), || Ok(0))
    }

    /// The local address (unnamed if unbound): Go's `LocalAddr`. Never
    /// blocks. Errors: getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address: Go's `RemoteAddr`. Never blocks.
    /// Errors: `NotConnected` without `connect`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down one or both halves: Go's `UnixConn.CloseRead`/
    /// `CloseWrite`. Never blocks. Errors: shutdown's.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.shutdown(how)
    }

    /// A second handle to the same socket (dup), registered separately;
    /// timeouts are not copied. Never blocks. Errors: dup's (`EMFILE`) or the
    /// poller's registration (resource exhaustion). No Go counterpart.
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        self.fd.check_open()?;
        UnixDatagram::wrap(self.inner.try_clone()?)
    }
}

common_socket_methods!(UnixDatagram);
std_conversions!(UnixDatagram, std::os::unix::net::UnixDatagram);

/// std's Debug for the Unix types: the fd, then the local address and
/// (but for listeners) the peer's, each when it can be read. (Until h42:
/// the fd alone.)
macro_rules! unix_debug {
    ($t:ident $(, $peer:ident)?) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut b = f.debug_struct(stringify!($t));
                b.field("fd", &self.inner.as_raw_fd());
                if let Ok(a) = self.inner.local_addr() {
                    b.field("local", &a);
                }
                $(if let Ok(a) = self.inner.$peer() {
                    b.field("peer", &a);
                })?
                b.finish()
            }
        }
    };
}
unix_debug!(UnixListener);
unix_debug!(UnixStream, peer_addr);
unix_debug!(UnixDatagram, peer_addr);

impl core::fmt::Debug for UnixIncoming<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UnixIncoming")
            .field("listener", &self.l)
            .finish_non_exhaustive()
    }
}
