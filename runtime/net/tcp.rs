//! TCP: `TcpListener` and `TcpStream` (Go's net.TCPListener / net.TCPConn).

use super::fd::{deadline, resolve, NetFd};
use super::{common_socket_methods, std_conversions, stream_io, AcceptLoop};
use crate::netpoll::Mode;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

/// Listen backlog: the system's maximum (Go's maxListenerBacklog reads
/// /proc/sys/net/core/somaxconn too), at least 128.
fn backlog() -> i32 {
    static B: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(4096)
            .clamp(128, 65535)
    })
}

/// A TCP socket server (Go's net.TCPListener; std's `TcpListener` shape).
/// `accept` parks the calling goroutine until a connection arrives.
pub struct TcpListener {
    fd: NetFd,
    inner: std::net::TcpListener,
}

impl TcpListener {
    /// Binds and listens on the first address of `addr` that works (Go's
    /// net.Listen("tcp", addr)); names are resolved inside `blocking`.
    /// SO_REUSEADDR is set and the backlog is the system's maximum
    /// (somaxconn). Errors: resolution, socket, bind or listen errors
    /// (e.g. `AddrInUse`); the last one if every address fails.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        let mut last = None;
        for a in resolve(addr)? {
            match Self::bind_addr(a) {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("resolve returns at least one address"))
    }

    fn bind_addr(a: SocketAddr) -> io::Result<TcpListener> {
        let s = Socket::new(Domain::for_address(a), Type::STREAM, None)?;
        s.set_nonblocking(true)?;
        s.set_reuse_address(true)?;
        s.bind(&a.into())?;
        s.listen(backlog())?;
        let inner: std::net::TcpListener = s.into();
        Ok(TcpListener {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }

    /// Accepts a connection (Go's Accept): parks until one arrives. The
    /// stream is non-blocking underneath and registered with the poller,
    /// with TCP_NODELAY set as Go sets it.
    /// Errors: accept4's (a full fd table is `EMFILE`: see [`incoming`],
    /// which retries those), the read timeout, or the closed error.
    ///
    /// [`incoming`]: TcpListener::incoming
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let lfd = self.inner.as_raw_fd();
        let (fd, addr) = self.fd.read_io(|| {
            // SAFETY: accept4 writes at most *len bytes of address into the
            // storage socket2 provides; the returned fd is new and ours.
            unsafe {
                SockAddr::try_init(|storage, len| {
                    let fd = libc::accept4(
                        lfd,
                        storage.cast(),
                        len,
                        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    );
                    if fd < 0 {
                        Err(crate::os::last_os_error())
                    } else {
                        Ok(fd)
                    }
                })
            }
        })?;
        // SAFETY: fd was just returned by accept4 and is owned by nobody else.
        let inner = unsafe { std::net::TcpStream::from_raw_fd(fd) };
        let addr = addr
            .as_socket()
            .ok_or_else(|| io::Error::other("accept: not an inet address"))?;
        // Go's newTCPConn: no Nagle delay (a reply written in two parts
        // would otherwise wait for the peer's delayed ACK, ~40 ms).
        let _ = inner.set_nodelay(true);
        Ok((TcpStream::from_nonblocking(inner)?, addr))
    }

    /// An endless iterator of accepted connections (std's `incoming`),
    /// hardened like Go's http.Server accept loop: temporary resource
    /// errors (EMFILE, ENFILE, ENOBUFS, ENOMEM) are logged once to stderr
    /// and retried after a backoff (5 ms doubling to 1 s, parking the
    /// goroutine); ECONNABORTED is skipped. Other errors are yielded.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming {
            l: self,
            accept: AcceptLoop::new(),
        }
    }

    /// The bound address (e.g. the port chosen for port 0): Go's
    /// `Listener.Addr`. Never blocks. Errors: getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// A second handle to the same socket (dup), registered separately.
    /// Never blocks. Errors: dup's (`EMFILE`) or the poller's registration
    /// (resource exhaustion). No Go counterpart (Go's `File()` dups too).
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        self.fd.check_open()?;
        TcpListener::wrap(self.inner.try_clone()?)
    }

    /// Sets IP_TTL (hops, 1..=255). Never blocks. Errors: setsockopt's
    /// (`InvalidInput` out of range). No Go counterpart in net (x/net/ipv4
    /// sets it per connection).
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_ttl(ttl)
    }

    /// IP_TTL's value (hops). Never blocks. Errors: getsockopt's. No Go
    /// counterpart in net.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }
}

common_socket_methods!(TcpListener);

std_conversions!(TcpListener, std::net::TcpListener);

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("addr", &self.inner.local_addr().ok())
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

/// Iterator of [`TcpListener::accept`]ed streams; see
/// [`TcpListener::incoming`]. Never returns `None`.
pub struct Incoming<'a> {
    l: &'a TcpListener,
    accept: AcceptLoop,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.accept.next(|| self.l.accept()))
    }
}

/// A TCP connection (Go's net.TCPConn; std's `TcpStream` shape). Reads and
/// writes park the calling goroutine until the socket is ready; `Read` and
/// `Write` are implemented for `TcpStream` and `&TcpStream` (one reader and
/// one writer at a time wait on the poller; more queue on a goroutine
/// mutex and are all woken as data or space arrives).
pub struct TcpStream {
    fd: NetFd,
    inner: std::net::TcpStream,
}

impl TcpStream {
    fn from_nonblocking(inner: std::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            fd: NetFd::new(inner.as_raw_fd())?,
            inner,
        })
    }

    /// Connects to the first address of `addr` that accepts (Go's
    /// net.Dial("tcp", addr)); names are resolved inside `blocking`. Parks
    /// until the handshake completes. TCP_NODELAY is set, as Go sets it.
    /// Errors: resolution errors, or the last address's connect error
    /// (e.g. `ConnectionRefused`).
    pub fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        let mut last = None;
        for a in resolve(addr)? {
            match Self::connect_addr(&a, None) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("resolve returns at least one address"))
    }

    /// Connects to `addr`, giving up after `timeout` with
    /// `ErrorKind::TimedOut` (std's `connect_timeout`; Go's DialTimeout).
    /// Errors: `InvalidInput` for a zero timeout, connect errors.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        Self::connect_addr(addr, Some(timeout))
    }

    fn connect_addr(a: &SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
        let dl = deadline(timeout);
        let s = Socket::new(Domain::for_address(*a), Type::STREAM, None)?;
        s.set_nonblocking(true)?;
        let r = s.connect(&(*a).into());
        let inner: std::net::TcpStream = s.into();
        // As in accept (Go's newTCPConn).
        let _ = inner.set_nodelay(true);
        match r {
            Ok(()) => return TcpStream::from_nonblocking(inner),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        // Registered after connect(2): the first edge reflects the handshake.
        let st = TcpStream::from_nonblocking(inner)?;
        st.fd.io(Mode::Write, dl, || {
            // Go's netFD.connect: SO_ERROR, then getpeername to be sure.
            if let Some(e) = st.inner.take_error()? {
                return Err(e);
            }
            match st.inner.peer_addr() {
                Ok(_) => Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                    Err(io::ErrorKind::WouldBlock.into())
                }
                Err(e) => Err(e),
            }
        })?;
        Ok(st)
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len();
        self.fd.stream_read(len, || (&self.inner).read(buf))
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        // std's TcpStream::write is send(MSG_NOSIGNAL) on Linux.
        self.fd.write_io(|| (&self.inner).write(buf))
    }

    /// Reads without consuming (MSG_PEEK); parks like `read` (and, like
    /// it, gives up at the read timeout with `TimedOut`). Errors: recv's,
    /// or `NotConnected` after `close`. No Go counterpart (Go's
    /// `bufio.Reader.Peek` buffers instead).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.read_io(|| self.inner.peek(buf))
    }

    /// The remote address: Go's `Conn.RemoteAddr`. Never blocks. Errors:
    /// getpeername's (`NotConnected`).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// The local address: Go's `Conn.LocalAddr`. Never blocks. Errors:
    /// getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Shuts down one or both halves (Go's CloseRead/CloseWrite). A peer
    /// blocked reading sees EOF after `Shutdown::Write`. Never blocks.
    /// Errors: shutdown's (`NotConnected` if the connection is gone).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.shutdown(how)
    }

    /// Sets TCP_NODELAY. On by default for streams from `accept`,
    /// `connect` and `connect_timeout`, as in Go (std leaves Nagle's
    /// algorithm on); a stream converted from std keeps its setting. Go's
    /// `TCPConn.SetNoDelay`. Never blocks. Errors: setsockopt's.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_nodelay(on)
    }

    /// Whether TCP_NODELAY is set. Never blocks. Errors: getsockopt's. No
    /// Go counterpart (Go cannot read it back).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.nodelay()
    }

    /// Sets IP_TTL (hops, 1..=255). Never blocks. Errors: setsockopt's
    /// (`InvalidInput` out of range). No Go counterpart in net (x/net/ipv4's
    /// `Conn.SetTTL`).
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_ttl(ttl)
    }

    /// IP_TTL's value (hops). Never blocks. Errors: getsockopt's. No Go
    /// counterpart in net (x/net/ipv4's `Conn.TTL`).
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// A second handle to the same connection (dup), registered with the
    /// poller separately; timeouts are not copied. Never blocks. Errors:
    /// dup's (`EMFILE`) or the poller's registration (resource
    /// exhaustion). No Go counterpart (Go's `File()` dups too).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        self.fd.check_open()?;
        TcpStream::from_nonblocking(self.inner.try_clone()?)
    }
}

common_socket_methods!(TcpStream);
std_conversions!(TcpStream, std::net::TcpStream, without TryFrom);
stream_io!(TcpStream);

impl From<std::net::TcpStream> for TcpStream {
    /// Takes over a connected std stream: makes it non-blocking and
    /// registers it with the poller; its timeouts (std's
    /// `set_read_timeout`, `set_write_timeout`) become this handle's. Panics if either fails (only on
    /// resource exhaustion: epoll_ctl ENOMEM/ENOSPC).
    ///
    /// The non-blocking mode belongs to the socket, not the handle: std
    /// handles cloned from `inner` (`try_clone`, dup) become non-blocking
    /// too and return `WouldBlock` where they blocked.
    fn from(inner: std::net::TcpStream) -> TcpStream {
        let t = inner
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_nonblocking(inner))
            .unwrap_or_else(|e| panic!("goro::net::TcpStream::from: {e}"));
        t.fd.adopt_timeouts(&t.inner);
        t
    }
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("addr", &self.inner.local_addr().ok())
            .field("peer", &self.inner.peer_addr().ok())
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

impl core::fmt::Debug for Incoming<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Incoming")
            .field("listener", &self.l)
            .finish_non_exhaustive()
    }
}
