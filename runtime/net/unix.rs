//! Unix-domain sockets: `UnixListener`, `UnixStream`, `UnixDatagram`
//! (Go's net.UnixListener / net.UnixConn).

use super::fd::{send_nosignal, NetFd};
use super::{common_socket_methods, stream_io, AcceptLoop};
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
        let inner = std::os::unix::net::UnixListener::bind(path)?;
        inner.set_nonblocking(true)?;
        Ok(UnixListener {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
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

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// A second handle to the same socket (dup), registered separately.
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        let inner = self.inner.try_clone()?;
        Ok(UnixListener {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }

    /// Deregisters the socket and returns it as a blocking std listener.
    ///
    /// The blocking mode belongs to the socket, not the handle: goro
    /// handles made from this one with `try_clone` (dup) become blocking
    /// too, so a goroutine using one then blocks its thread and its
    /// timeouts stop applying. Convert the last handle, or move every
    /// clone to std.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixListener> {
        let UnixListener { fd, inner } = self;
        drop(fd);
        inner.set_nonblocking(false)?;
        Ok(inner)
    }
}

common_socket_methods!(UnixListener);

impl TryFrom<std::os::unix::net::UnixListener> for UnixListener {
    type Error = io::Error;
    /// Takes over a std listener: makes it non-blocking and registers it.
    /// Errors: fcntl's or epoll_ctl's (resource exhaustion).
    ///
    /// The non-blocking mode belongs to the socket, not the handle: std
    /// handles cloned from it (`try_clone`, dup) become non-blocking too
    /// and return `WouldBlock` where they blocked.
    fn try_from(inner: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        inner.set_nonblocking(true)?;
        Ok(UnixListener {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }
}

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
    fn wrap(inner: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        inner.set_nonblocking(true)?;
        Ok(UnixStream {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }

    /// Connects to the socket at `path`. A Unix connect completes at once
    /// or fails (it only blocks while the listener's backlog is full), so
    /// it runs inside `blocking`. Errors: connect's (e.g. `NotFound`,
    /// `ConnectionRefused`).
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        let s = crate::blocking(|| std::os::unix::net::UnixStream::connect(path))?;
        UnixStream::wrap(s)
    }

    /// A connected pair (socketpair(2)).
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

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down one or both halves; the peer reads EOF after `Write`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// A second handle to the same connection (dup), registered separately.
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        UnixStream::wrap(self.inner.try_clone()?)
    }

    /// Deregisters the socket and returns it as a blocking std stream.
    ///
    /// The blocking mode belongs to the socket, not the handle: goro
    /// handles made from this one with `try_clone` (dup) become blocking
    /// too, so a goroutine using one then blocks its thread and its
    /// timeouts stop applying. Convert the last handle, or move every
    /// clone to std.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixStream> {
        let UnixStream { fd, inner } = self;
        drop(fd);
        inner.set_nonblocking(false)?;
        Ok(inner)
    }
}

common_socket_methods!(UnixStream);
stream_io!(UnixStream);

impl TryFrom<std::os::unix::net::UnixStream> for UnixStream {
    type Error = io::Error;
    /// Takes over a connected std stream: makes it non-blocking and
    /// registers it. Errors: fcntl's or epoll_ctl's (resource exhaustion).
    ///
    /// The non-blocking mode belongs to the socket, not the handle: std
    /// handles cloned from it (`try_clone`, dup) become non-blocking too
    /// and return `WouldBlock` where they blocked.
    fn try_from(inner: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        UnixStream::wrap(inner)
    }
}

/// A Unix datagram socket (std's `UnixDatagram` shape). Receives park
/// until a datagram arrives.
pub struct UnixDatagram {
    fd: NetFd,
    inner: std::os::unix::net::UnixDatagram,
}

impl UnixDatagram {
    fn wrap(inner: std::os::unix::net::UnixDatagram) -> io::Result<UnixDatagram> {
        inner.set_nonblocking(true)?;
        Ok(UnixDatagram {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }

    /// Binds to the filesystem `path`.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(std::os::unix::net::UnixDatagram::bind(path)?)
    }

    /// An unbound socket (it can still `send_to`).
    pub fn unbound() -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(std::os::unix::net::UnixDatagram::unbound()?)
    }

    /// A connected pair (socketpair(2)).
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
        Ok((UnixDatagram::wrap(a)?, UnixDatagram::wrap(b)?))
    }

    /// Sets the default peer for `send`/`recv`.
    pub fn connect<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.inner.connect(path)
    }

    /// Sends one datagram to `path`; parks while the peer's queue is full.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        let p = path.as_ref();
        self.fd.write_io(|| self.inner.send_to(buf, p))
    }

    /// Sends one datagram to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        self.fd.write_io(|| send_nosignal(fd, buf))
    }

    /// Receives one datagram and its source; parks until one arrives.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.fd.read_io(|| self.inner.recv_from(buf))
    }

    /// Receives one datagram; parks until one arrives.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.read_io(|| self.inner.recv(buf))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down one or both halves.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// A second handle to the same socket (dup), registered separately.
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(self.inner.try_clone()?)
    }

    /// Deregisters the socket and returns it as a blocking std socket.
    ///
    /// The blocking mode belongs to the socket, not the handle: goro
    /// handles made from this one with `try_clone` (dup) become blocking
    /// too, so a goroutine using one then blocks its thread and its
    /// timeouts stop applying. Convert the last handle, or move every
    /// clone to std.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixDatagram> {
        let UnixDatagram { fd, inner } = self;
        drop(fd);
        inner.set_nonblocking(false)?;
        Ok(inner)
    }
}

common_socket_methods!(UnixDatagram);

impl TryFrom<std::os::unix::net::UnixDatagram> for UnixDatagram {
    type Error = io::Error;
    /// Takes over a std socket: makes it non-blocking and registers it.
    /// Errors: fcntl's or epoll_ctl's (resource exhaustion).
    ///
    /// The non-blocking mode belongs to the socket, not the handle: std
    /// handles cloned from it (`try_clone`, dup) become non-blocking too
    /// and return `WouldBlock` where they blocked.
    fn try_from(inner: std::os::unix::net::UnixDatagram) -> io::Result<UnixDatagram> {
        UnixDatagram::wrap(inner)
    }
}

macro_rules! unix_debug {
    ($t:ident) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("fd", &self.inner.as_raw_fd())
                    .finish()
            }
        }
    };
}
unix_debug!(UnixListener);
unix_debug!(UnixStream);
unix_debug!(UnixDatagram);

impl core::fmt::Debug for UnixIncoming<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UnixIncoming")
            .field("listener", &self.l)
            .finish_non_exhaustive()
    }
}
