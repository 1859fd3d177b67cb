//! UDP: `UdpSocket` (Go's net.UDPConn).

use super::fd::{resolve, send_nosignal, NetFd};
use super::{common_socket_methods, std_conversions};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;

/// A UDP socket (Go's net.UDPConn; std's `UdpSocket` shape). Receives park
/// the calling goroutine until a datagram arrives; sends park only while
/// the socket buffer is full.
pub struct UdpSocket {
    fd: NetFd,
    inner: std::net::UdpSocket,
}

impl UdpSocket {
    /// Binds to the first address of `addr` that works (Go's
    /// net.ListenPacket("udp", addr)); names are resolved inside
    /// `blocking`. Errors: resolution or bind errors.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        let addrs = resolve(addr)?;
        UdpSocket::wrap(std::net::UdpSocket::bind(&addrs[..])?)
    }

    /// Receives one datagram and its source; parks until one arrives.
    /// A datagram longer than `buf` is truncated. If the receiving side is
    /// shut down (`shutdown(2)` with `SHUT_RD` on the fd) and nothing is
    /// queued, fails at once with std's `InvalidInput` (the kernel reports
    /// no source address). Errors: recvfrom's, the
    /// read timeout, or the closed error. Go's `UDPConn.ReadFrom`.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.fd
            .dgram_read(|| self.inner.recv_from(buf), no_source_address)
    }

    /// Like `recv_from` without consuming the datagram: parks until one
    /// arrives. Errors: as `recv_from`. No Go counterpart.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.fd
            .dgram_read(|| self.inner.peek_from(buf), no_source_address)
    }

    /// Sends one datagram to `addr` (resolved inside `blocking`, so prefer
    /// a `SocketAddr` in hot loops); returns the bytes sent. Errors:
    /// resolution, sendto's (e.g. `ConnectionRefused` reported from an
    /// earlier ICMP error), the write timeout, or the closed error. Parks
    /// only while the socket's send buffer is full (rare for UDP). Go's
    /// `UDPConn.WriteTo`.
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let a = resolve(addr)?[0];
        self.fd.write_io(|| self.inner.send_to(buf, a))
    }

    /// Sets the default peer (std's `connect`; Go's DialUDP): `send` and
    /// `recv` then use it, and datagrams from others are dropped. Does not
    /// wait for the peer (UDP has no handshake); names are resolved inside
    /// `blocking`. Errors: resolution or connect's (e.g.
    /// `NetworkUnreachable`).
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        self.fd.check_open()?;
        let addrs = resolve(addr)?;
        self.inner.connect(&addrs[..])
    }

    /// Sends one datagram to the connected peer; returns the bytes sent.
    /// Parks only while the socket's send buffer is full (rare for UDP:
    /// sends do not wait in practice). Errors: send's (`NotConnected`
    /// without `connect`; `ConnectionRefused` from an earlier ICMP error),
    /// the write timeout, or the closed error. Go's `UDPConn.Write`.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        self.fd.write_io(|| send_nosignal(fd, buf))
    }

    /// Receives one datagram from the connected peer; parks until one
    /// arrives. A datagram longer than `buf` is truncated. `Ok(0)` at once
    /// if the receiving side is shut down and nothing is queued, as std's
    /// (`peek` too). Errors: recv's
    /// (`ConnectionRefused` from an earlier ICMP error), the read timeout,
    /// or the closed error. Go's `UDPConn.Read`.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.dgram_read(|| self.inner.recv(buf), || Ok(0))
    }

    /// The bound address: Go's `LocalAddr`. Never blocks. Errors:
    /// getsockname's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address: Go's `RemoteAddr`. Never blocks.
    /// Errors: `NotConnected` without `connect`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Sets SO_BROADCAST (off by default, as in std; Go sets it on every
    /// UDP socket and has no setter). Never blocks. Errors: setsockopt's.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_broadcast(on)
    }

    /// Whether SO_BROADCAST is set. Never blocks. Errors: getsockopt's. No
    /// Go counterpart.
    pub fn broadcast(&self) -> io::Result<bool> {
        self.inner.broadcast()
    }

    /// Sets IP_TTL (hops, 1..=255) for unicast datagrams. Never blocks.
    /// Errors: setsockopt's (`InvalidInput` out of range). No Go
    /// counterpart in net (x/net/ipv4's `PacketConn.SetTTL`).
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_ttl(ttl)
    }

    /// IP_TTL's value (hops). Never blocks. Errors: getsockopt's. No Go
    /// counterpart in net (x/net/ipv4's `PacketConn.TTL`).
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Joins the IPv4 multicast group `multiaddr` on the interface with
    /// address `interface` (std's `join_multicast_v4`; Go's
    /// `ListenMulticastUDP`). Never blocks. Errors: setsockopt's.
    pub fn join_multicast_v4(&self, multiaddr: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.join_multicast_v4(multiaddr, interface)
    }

    /// Joins the IPv6 multicast group `multiaddr` on interface index
    /// `interface` (0: the default). Never blocks. Errors: setsockopt's.
    pub fn join_multicast_v6(&self, multiaddr: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.join_multicast_v6(multiaddr, interface)
    }

    /// Leaves a group joined with `join_multicast_v4`. Never blocks.
    /// Errors: setsockopt's.
    pub fn leave_multicast_v4(&self, multiaddr: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.leave_multicast_v4(multiaddr, interface)
    }

    /// Leaves a group joined with `join_multicast_v6`. Never blocks.
    /// Errors: setsockopt's.
    pub fn leave_multicast_v6(&self, multiaddr: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.leave_multicast_v6(multiaddr, interface)
    }

    /// Sets IP_MULTICAST_LOOP (whether this host receives its own IPv4
    /// multicast). Never blocks. Errors: setsockopt's.
    pub fn set_multicast_loop_v4(&self, on: bool) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_multicast_loop_v4(on)
    }

    /// IP_MULTICAST_LOOP's value. Never blocks. Errors: getsockopt's.
    pub fn multicast_loop_v4(&self) -> io::Result<bool> {
        self.inner.multicast_loop_v4()
    }

    /// Sets IP_MULTICAST_TTL (hops of IPv4 multicast; 1 by default).
    /// Never blocks. Errors: setsockopt's.
    pub fn set_multicast_ttl_v4(&self, ttl: u32) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_multicast_ttl_v4(ttl)
    }

    /// IP_MULTICAST_TTL's value. Never blocks. Errors: getsockopt's.
    pub fn multicast_ttl_v4(&self) -> io::Result<u32> {
        self.inner.multicast_ttl_v4()
    }

    /// Sets IPV6_MULTICAST_LOOP. Never blocks. Errors: setsockopt's
    /// (an IPv4 socket's).
    pub fn set_multicast_loop_v6(&self, on: bool) -> io::Result<()> {
        self.fd.check_open()?;
        self.inner.set_multicast_loop_v6(on)
    }

    /// IPV6_MULTICAST_LOOP's value. Never blocks. Errors: getsockopt's.
    pub fn multicast_loop_v6(&self) -> io::Result<bool> {
        self.inner.multicast_loop_v6()
    }

    /// Receives one datagram from the connected peer without removing it
    /// from the queue; parks until one arrives. Errors: as `recv`. No Go
    /// counterpart.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.dgram_read(|| self.inner.peek(buf), || Ok(0))
    }

    /// A second handle to the same socket (dup), registered separately;
    /// timeouts are not copied. Never blocks. Errors: dup's (`EMFILE`) or
    /// the poller's registration (resource exhaustion). No Go counterpart.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        self.fd.check_open()?;
        UdpSocket::wrap(self.inner.try_clone()?)
    }
}

/// `recv_from`'s and `peek_from`'s result on a socket whose receiving
/// side is shut down, with nothing queued: std's. Its blocking recvfrom
/// returns 0 bytes from no address (address length 0), which std turns
/// into this error; the non-blocking one returns EAGAIN (`dgram_read`).
fn no_source_address() -> io::Result<(usize, SocketAddr)> {
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "invalid argument",
    ))
}

common_socket_methods!(UdpSocket);

std_conversions!(UdpSocket, std::net::UdpSocket);

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("addr", &self.inner.local_addr().ok())
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}
