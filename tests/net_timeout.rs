//! Ports of Go's net/timeout_test.go (1.19) to goro::net.
//!
//! Go sets absolute deadlines (`SetDeadline(t)`), which also apply to an
//! operation already blocked and make every later operation fail once past;
//! goro has std's per-operation timeouts (`set_read_timeout(Some(d))`: each
//! operation that waits longer than `d` fails with `TimedOut`; docs/NET.md).
//! The ports keep each test's point under that model:
//! - a deadline `t` in the future becomes a timeout of `t - now` set before
//!   the operation starts;
//! - Go's rows with a deadline in the past ("deadline exceeded even with
//!   data ready") have no per-operation counterpart (a zero timeout is
//!   rejected, as in std) and are left out;
//! - `SetDeadline(noDeadline)` is `set_read_timeout(None)`.
//!
//! No sleep orders events. The "must not return" tests wait a while (Go's
//! 100 ms) to see that an operation did *not* finish, then close the socket
//! to end it. Timeouts are checked never to fire early; lateness is only
//! bounded the way Go bounds it (TestReadTimeoutFluctuation's retries with
//! longer timeouts, up to 4 s) or by the watchdog.

mod common;
use common::{qemu, run, scale};

use goro::net::{TcpListener, TcpStream, UdpSocket};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn local_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// A connected pair: (client, server side).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = local_listener();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Go's os.ErrDeadlineExceeded.
fn is_timeout(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::TimedOut
}

/// How long the "must not return" tests watch an operation (Go's 100 ms).
const MUST_NOT_RETURN: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------------------
// Dial

/// A listener whose accept queue is full: Linux drops further SYNs, so a
/// connect to it stays pending (Go's TestDialTimeout fakes this with a
/// socket filter). Returns the listener and the connections that filled it
/// (kept open).
fn full_backlog_listener() -> (std::net::TcpListener, Vec<TcpStream>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen(2) on our own bound socket; a backlog of 0 lets the
    // kernel queue one connection.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let addr = l.local_addr().unwrap();
    let mut filled = Vec::new();
    for _ in 0..64 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(c) => filled.push(c),
            Err(e) if is_timeout(&e) => return (l, filled),
            Err(e) => panic!("filling the accept queue: {e}"),
        }
    }
    panic!("the accept queue never filled up");
}

/// TestDialTimeout (net/timeout_test.go), its rows with a positive timeout:
/// a dial that never completes fails with a timeout error, not before the
/// timeout, from several goroutines at once.
#[test]
fn dial_timeout() {
    let _w = common::watchdog();
    run(|| {
        let (l, _filled) = full_backlog_listener();
        let addr = l.local_addr().unwrap();
        let hs: Vec<_> = [1u64, 10, 50, 50, 100]
            .into_iter()
            .map(|ms| {
                goro::go!(move || {
                    let d = Duration::from_millis(ms);
                    let t0 = Instant::now();
                    match TcpStream::connect_timeout(&addr, d) {
                        Ok(c) => panic!(
                            "unexpectedly established: {:?}->{:?}",
                            c.local_addr(),
                            c.peer_addr()
                        ),
                        Err(e) => assert!(is_timeout(&e), "{d:?}: {e}"),
                    }
                    let el = t0.elapsed();
                    assert!(el >= d, "dial timed out early: {el:?} < {d:?}");
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// TestDialTimeoutMaxDuration (net/timeout_test.go): a timeout so large that
/// the deadline overflows means no deadline; the dial succeeds.
#[test]
fn dial_timeout_max_duration() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let addr = l.local_addr().unwrap();
        for d in [
            Duration::MAX,
            Duration::from_nanos(i64::MAX as u64),
            Duration::from_secs(u64::MAX / 2),
        ] {
            let c = TcpStream::connect_timeout(&addr, d).unwrap_or_else(|e| panic!("{d:?}: {e}"));
            let (s, _) = l.accept().unwrap();
            // And the same durations as read and write timeouts.
            c.set_read_timeout(Some(d)).unwrap();
            c.set_write_timeout(Some(d)).unwrap();
            (&s).write_all(b"x").unwrap();
            let mut b = [0u8; 1];
            (&c).read_exact(&mut b).unwrap();
            (&c).write_all(b"y").unwrap();
            (&s).read_exact(&mut b).unwrap();
            assert_eq!(&b, b"y");
        }
    });
}

// ---------------------------------------------------------------------------
// Accept

/// TestAcceptTimeout (net/timeout_test.go), its 50 ms row: accepts succeed
/// while connections are queued, then time out, and keep timing out.
#[test]
fn accept_timeout() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let addr = l.local_addr().unwrap();
        let d = Duration::from_millis(50);
        // Connections dialled before the accepts (Go dials one for its
        // past-deadline row); they must be accepted, not lost.
        let dialled: Vec<_> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        l.set_read_timeout(Some(d)).unwrap();
        let mut accepted = 0;
        let mut timeouts = 0;
        while timeouts < 2 {
            let t0 = Instant::now();
            match l.accept() {
                Ok(_) => accepted += 1,
                Err(e) => {
                    assert!(is_timeout(&e), "#{timeouts}: {e}");
                    assert!(
                        accepted == dialled.len(),
                        "timed out with a connection queued"
                    );
                    let el = t0.elapsed();
                    assert!(el >= d, "accept timed out early: {el:?}");
                    timeouts += 1;
                }
            }
        }
        assert_eq!(accepted, dialled.len());
    });
}

/// TestAcceptTimeoutMustReturn (net/timeout_test.go): after clearing the
/// timeout and setting a 10 ms one, a blocked accept returns a timeout.
#[test]
fn accept_timeout_must_return() {
    let _w = common::watchdog();
    run(|| {
        let l = Arc::new(local_listener());
        let l2 = l.clone();
        let h = goro::go!(move || {
            l2.set_read_timeout(None).unwrap();
            l2.set_read_timeout(Some(Duration::from_millis(10)))
                .unwrap();
            l2.accept().map(|_| ())
        });
        let e = h.join().unwrap().unwrap_err();
        assert!(is_timeout(&e), "{e}");
    });
}

/// TestAcceptTimeoutMustNotReturn (net/timeout_test.go): with the timeout
/// cleared, accept stays blocked; closing the listener ends it with an
/// error that is not a timeout.
#[test]
fn accept_timeout_must_not_return() {
    let _w = common::watchdog();
    run(|| {
        let l = Arc::new(local_listener());
        let l2 = l.clone();
        let (started_tx, started_rx) = goro::chan::<()>(0);
        let h = goro::go!(move || {
            l2.set_read_timeout(Some(Duration::from_nanos(1))).unwrap();
            l2.set_read_timeout(None).unwrap();
            started_tx.send(()).unwrap();
            l2.accept().map(|_| ())
        });
        started_rx.recv().unwrap();
        let max = goro::time::Timer::new(MUST_NOT_RETURN);
        max.recv();
        assert!(
            !h.is_finished(),
            "expected accept to not return, but it returned"
        );
        l.close();
        let e = h.join().unwrap().unwrap_err();
        assert!(!is_timeout(&e), "accept after close: {e}");
    });
}

// ---------------------------------------------------------------------------
// Read

/// TestReadTimeout (net/timeout_test.go), its 50 ms row: data already sent
/// is read (one byte at a time) despite the timeout, then reads time out
/// with 0 bytes, twice.
#[test]
fn read_timeout() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let addr = l.local_addr().unwrap();
        let msg = b"READ TIMEOUT TEST";
        let server = goro::go!(move || {
            let (s, _) = l.accept().unwrap();
            (&s).write_all(msg).unwrap();
            s // kept open until the client is done
        });
        let c = TcpStream::connect(addr).unwrap();
        let d = Duration::from_millis(50);
        c.set_read_timeout(Some(d)).unwrap();
        let mut got = Vec::new();
        let mut timeouts = 0;
        while timeouts < 2 {
            let mut b = [0u8; 1];
            let t0 = Instant::now();
            match (&c).read(&mut b) {
                Ok(0) => panic!("unexpected EOF"),
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) => {
                    assert!(is_timeout(&e), "#{timeouts}: {e}");
                    let el = t0.elapsed();
                    assert!(el >= d, "read timed out early: {el:?}");
                    timeouts += 1;
                }
            }
        }
        assert_eq!(
            &got[..],
            &msg[..],
            "data lost or reordered around the timeout"
        );
        drop(server.join().unwrap());
    });
}

/// TestReadTimeoutMustNotReturn (net/timeout_test.go): with a write timeout
/// set and the read timeout cleared, a read stays blocked; close ends it
/// with an error that is not a timeout.
#[test]
fn read_timeout_must_not_return() {
    let _w = common::watchdog();
    run(|| {
        let (c, _s) = tcp_pair();
        let c = Arc::new(c);
        let c2 = c.clone();
        let (started_tx, started_rx) = goro::chan::<()>(0);
        let h = goro::go!(move || {
            c2.set_read_timeout(Some(Duration::from_nanos(1))).unwrap();
            c2.set_write_timeout(Some(Duration::from_nanos(1))).unwrap();
            c2.set_read_timeout(None).unwrap();
            started_tx.send(()).unwrap();
            (&*c2).read(&mut [0u8; 1])
        });
        started_rx.recv().unwrap();
        let max = goro::time::Timer::new(MUST_NOT_RETURN);
        max.recv();
        assert!(
            !h.is_finished(),
            "expected read to not return, but it returned"
        );
        c.close();
        let e = h.join().unwrap().unwrap_err();
        assert!(!is_timeout(&e), "read after close: {e}");
    });
}

/// TestReadFromTimeout (net/timeout_test.go), its 50 ms row, for UDP: a
/// datagram already sent is received, then recv_from times out, twice.
#[test]
fn read_from_timeout() {
    let _w = common::watchdog();
    run(|| {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let msg = b"READFROM TIMEOUT TEST";
        server.send_to(msg, c.local_addr().unwrap()).unwrap();
        let d = Duration::from_millis(50);
        c.set_read_timeout(Some(d)).unwrap();
        let mut datagrams = 0;
        let mut timeouts = 0;
        while timeouts < 2 {
            let mut b = [0u8; 1];
            let t0 = Instant::now();
            match c.recv_from(&mut b) {
                Ok((n, from)) => {
                    assert_eq!((n, from), (1, server.local_addr().unwrap()));
                    assert_eq!(b[0], msg[0]);
                    datagrams += 1;
                }
                Err(e) => {
                    assert!(is_timeout(&e), "#{timeouts}: {e}");
                    let el = t0.elapsed();
                    assert!(el >= d, "recv_from timed out early: {el:?}");
                    timeouts += 1;
                }
            }
        }
        assert_eq!(datagrams, 1);
    });
}

// ---------------------------------------------------------------------------
// Write

/// TestWriteTimeout (net/timeout_test.go), its 10 ms row: writes to a peer
/// that never reads succeed until the socket buffers are full, then time
/// out, twice.
#[test]
fn write_timeout() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        // Never accepted, never read: the kernel completes the handshake
        // and queues the connection.
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let d = Duration::from_millis(10);
        c.set_write_timeout(Some(d)).unwrap();
        let chunk = [b'W'; 4096];
        let mut wrote = 0usize;
        let mut timeouts = 0;
        while timeouts < 2 {
            let t0 = Instant::now();
            match (&c).write(&chunk) {
                Ok(n) => wrote += n,
                Err(e) => {
                    assert!(is_timeout(&e), "#{timeouts}: {e}");
                    let el = t0.elapsed();
                    assert!(el >= d, "write timed out early: {el:?}");
                    timeouts += 1;
                }
            }
            assert!(wrote < 1 << 30, "write never blocked");
        }
        assert!(wrote > 0);
    });
}

/// TestWriteTimeoutMustNotReturn (net/timeout_test.go): with a read timeout
/// set and the write timeout cleared, a writer to a peer that never reads
/// blocks once the buffers are full and stays blocked; close ends it with
/// an error that is not a timeout.
#[test]
fn write_timeout_must_not_return() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let c = Arc::new(TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let c2 = c.clone();
        let (started_tx, started_rx) = goro::chan::<()>(0);
        let h = goro::go!(move || {
            c2.set_write_timeout(Some(Duration::from_nanos(1))).unwrap();
            c2.set_read_timeout(Some(Duration::from_nanos(1))).unwrap();
            c2.set_write_timeout(None).unwrap();
            started_tx.send(()).unwrap();
            let b = [0u8; 4096];
            loop {
                if let Err(e) = (&*c2).write(&b) {
                    return e;
                }
            }
        });
        started_rx.recv().unwrap();
        let max = goro::time::Timer::new(MUST_NOT_RETURN);
        max.recv();
        assert!(
            !h.is_finished(),
            "expected write to not return, but it returned"
        );
        c.close();
        let e = h.join().unwrap();
        assert!(!is_timeout(&e), "write after close: {e}");
        drop(l);
    });
}

// ---------------------------------------------------------------------------
// Fluctuation: Go's adaptive bound on lateness.

const MIN_DYNAMIC_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_DYNAMIC_TIMEOUT: Duration = Duration::from_secs(4);

/// Go's timeoutUpperBound.
fn timeout_upper_bound(d: Duration) -> Duration {
    d * 11 / 10
}

/// Go's nextTimeout.
fn next_timeout(actual: Duration) -> Option<Duration> {
    if actual >= MAX_DYNAMIC_TIMEOUT {
        return None;
    }
    Some((actual * 5 / 4).min(MAX_DYNAMIC_TIMEOUT))
}

/// The body of TestRead{,From,Write}TimeoutFluctuation: `op(d)` does one
/// operation that waits with timeout `d` and returns its result and how
/// long that wait took. It must fail with a timeout, never early; if it is
/// more than 10% late, retry with a longer timeout (Go's loop), failing
/// only if even a 4 s timeout is more than 10% late.
fn timeout_fluctuation(
    what: &str,
    mut op: impl FnMut(Duration) -> (std::io::Result<usize>, Duration),
) {
    let mut d = MIN_DYNAMIC_TIMEOUT;
    loop {
        let (r, actual) = op(d);
        match r {
            Err(e) if is_timeout(&e) => {}
            other => panic!("{what} did not return a timeout: {other:?}"),
        }
        assert!(
            actual >= d,
            "{what} took {actual:?}; expected at least {d:?}"
        );
        if actual > timeout_upper_bound(d) {
            match next_timeout(actual) {
                Some(next) => {
                    d = next;
                    continue;
                }
                None => panic!(
                    "{what} took {actual:?}; expected at most {:?}",
                    timeout_upper_bound(d)
                ),
            }
        }
        break;
    }
}

/// Times `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t0 = Instant::now();
    let r = f();
    (r, t0.elapsed())
}

/// TestReadTimeoutFluctuation (net/timeout_test.go).
#[test]
fn read_timeout_fluctuation() {
    let _w = common::watchdog();
    run(|| {
        let (c, _s) = tcp_pair();
        let mut b = [0u8; 256];
        timeout_fluctuation("read", |d| {
            c.set_read_timeout(Some(d)).unwrap();
            timed(|| (&c).read(&mut b))
        });
    });
}

/// TestReadFromTimeoutFluctuation (net/timeout_test.go).
#[test]
fn read_from_timeout_fluctuation() {
    let _w = common::watchdog();
    run(|| {
        let c1 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        c2.connect(c1.local_addr().unwrap()).unwrap();
        let mut b = [0u8; 256];
        timeout_fluctuation("recv_from", |d| {
            c2.set_read_timeout(Some(d)).unwrap();
            timed(|| c2.recv_from(&mut b).map(|(n, _)| n))
        });
    });
}

/// TestWriteTimeoutFluctuation (net/timeout_test.go): writes to a peer that
/// never reads until one times out. Under per-operation timeouts only the
/// write that finds the buffers full waits, so that write's duration is
/// the one bounded (Go measures from the deadline's start and retries when
/// filling the buffers took the time).
#[test]
fn write_timeout_fluctuation() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let chunk = [b'T'; 4096];
        timeout_fluctuation("write", |d| {
            c.set_write_timeout(Some(d)).unwrap();
            loop {
                let (r, took) = timed(|| (&c).write(&chunk));
                if r.is_err() {
                    return (r, took);
                }
            }
        });
        drop(l);
    });
}

// ---------------------------------------------------------------------------
// VariousDeadlines

/// testVariousDeadlines (net/timeout_test.go): the server never writes; a
/// client reading until EOF (Go's io.Copy to io.Discard) with timeouts from
/// 1 ns to 1 s must end with a timeout every time: a timer that fires
/// before, while or after the reader parks must never be lost.
fn various_deadlines() {
    let l = local_listener();
    let addr = l.local_addr().unwrap();
    let l = Arc::new(l);
    let server = {
        let l = l.clone();
        goro::go!(move || {
            while let Ok((c, _)) = l.accept() {
                goro::go!(move || {
                    // Wait for the client to close the connection.
                    let _ = (&c).read(&mut [0u8; 1]);
                });
            }
        })
    };
    let ns = |n: u64| Duration::from_nanos(n);
    let timeouts = [
        ns(1),
        ns(2),
        ns(5),
        ns(50),
        ns(100),
        ns(200),
        ns(500),
        ns(750),
        ns(1_000),
        ns(5_000),
        ns(25_000),
        ns(250_000),
        ns(500_000),
        ns(1_000_000),
        ns(5_000_000),
        ns(100_000_000),
        ns(250_000_000),
        ns(500_000_000),
        ns(1_000_000_000),
    ];
    // Go's -short: one run each, nothing above 500 us.
    let short = qemu();
    for timeout in timeouts {
        let num_runs = if short { 1 } else { 3 };
        if short && timeout > Duration::from_micros(500) {
            continue;
        }
        for run in 0..num_runs {
            let c = TcpStream::connect(addr).unwrap();
            let t0 = Instant::now();
            c.set_read_timeout(Some(timeout)).unwrap();
            let r = goro::io::copy(&mut &c, &mut std::io::sink());
            let dt = t0.elapsed();
            c.close();
            match r {
                Err(e) if is_timeout(&e) => {
                    assert!(
                        dt >= timeout,
                        "{timeout:?} {run}/{num_runs}: early timeout after {dt:?}"
                    )
                }
                other => panic!("{timeout:?} {run}/{num_runs}: copy = {other:?}; want timeout"),
            }
        }
    }
    l.close();
    server.join().unwrap();
}

/// Runs `body` in a child process (this test binary, only the test `name`)
/// with `GOMAXPROCS=procs`, as Go's TestVariousDeadlines{1,4}Proc change
/// GOMAXPROCS around the test; a child leaves the other tests of this
/// binary alone.
fn in_child_with_procs(name: &str, procs: usize, body: fn()) {
    const CHILD: &str = "GORO_NET_TIMEOUT_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let _w = common::watchdog();
        run(move || {
            assert_eq!(goro::max_procs(), procs);
            body()
        });
        return;
    }
    let out = common::self_test_command(name)
        .env(CHILD, "1")
        .env("GOMAXPROCS", procs.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child {name} (GOMAXPROCS={procs}) failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// TestVariousDeadlines (net/timeout_test.go).
#[test]
fn various_deadlines_default_procs() {
    let _w = common::watchdog();
    run(various_deadlines);
}

/// TestVariousDeadlines1Proc (net/timeout_test.go).
#[test]
fn various_deadlines_1proc() {
    in_child_with_procs("various_deadlines_1proc", 1, various_deadlines);
}

/// TestVariousDeadlines4Proc (net/timeout_test.go).
#[test]
fn various_deadlines_4proc() {
    in_child_with_procs("various_deadlines_4proc", 4, various_deadlines);
}

// ---------------------------------------------------------------------------
// Races between setting timeouts and operations.

/// TestReadWriteProlongedTimeout (net/timeout_test.go): on the server side
/// one goroutine reads and one writes, each setting a one-hour timeout
/// before every operation, while the client does 1000 one-byte write/read
/// round trips; closing the client ends both server loops with errors.
#[test]
fn read_write_prolonged_timeout() {
    let _w = common::watchdog();
    run(|| {
        let l = local_listener();
        let addr = l.local_addr().unwrap();
        let handler = goro::go!(move || {
            let (s, _) = l.accept().unwrap();
            let s = Arc::new(s);
            let wg = goro::sync::WaitGroup::new();
            wg.add(2);
            {
                let (s, wg) = (s.clone(), wg.clone());
                goro::go!(move || {
                    let mut b = [0u8; 1];
                    loop {
                        s.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
                        match (&*s).read(&mut b) {
                            Ok(0) => break, // EOF: Go's io.EOF error
                            Ok(_) => {}
                            Err(e) => {
                                assert!(!is_timeout(&e), "server read: {e}");
                                break;
                            }
                        }
                    }
                    wg.done();
                });
            }
            {
                let (s, wg) = (s.clone(), wg.clone());
                goro::go!(move || {
                    let b = [0u8; 1];
                    loop {
                        s.set_write_timeout(Some(Duration::from_secs(3600)))
                            .unwrap();
                        if let Err(e) = (&*s).write(&b) {
                            assert!(!is_timeout(&e), "server write: {e}");
                            break;
                        }
                    }
                    wg.done();
                });
            }
            wg.wait();
        });
        let c = TcpStream::connect(addr).unwrap();
        let mut b = [0u8; 1];
        for _ in 0..scale(1000) {
            (&c).write_all(&b).unwrap();
            (&c).read_exact(&mut b).unwrap();
        }
        // Closing with unread data resets the connection: the server's
        // writer fails even if its buffers were full.
        drop(c);
        handler.join().unwrap();
    });
}

/// TestReadWriteDeadlineRace (net/timeout_test.go): one goroutine keeps
/// setting 2 us read and write timeouts (paced by a 2 us ticker) while one
/// reads and one writes, N times each, ignoring timeout errors; nothing
/// hangs or panics. (Per-operation timeouts are set once before the
/// readers start: under std's model a timeout set later does not reach an
/// operation already blocked, where Go's deadline would.)
#[test]
fn read_write_deadline_race() {
    let _w = common::watchdog();
    run(|| {
        let n = if qemu() { 50 } else { 1000 };
        let l = local_listener();
        let c = Arc::new(TcpStream::connect(l.local_addr().unwrap()).unwrap());
        c.set_read_timeout(Some(Duration::from_micros(2))).unwrap();
        c.set_write_timeout(Some(Duration::from_micros(2))).unwrap();
        let wg = goro::sync::WaitGroup::new();
        wg.add(3);
        {
            let (c, wg) = (c.clone(), wg.clone());
            goro::go!(move || {
                let tic = goro::time::Ticker::new(Duration::from_micros(2));
                for _ in 0..n {
                    c.set_read_timeout(Some(Duration::from_micros(2))).unwrap();
                    c.set_write_timeout(Some(Duration::from_micros(2))).unwrap();
                    tic.recv();
                }
                tic.stop();
                wg.done();
            });
        }
        {
            let (c, wg) = (c.clone(), wg.clone());
            goro::go!(move || {
                let mut b = [0u8; 1];
                for _ in 0..n {
                    match (&*c).read(&mut b) {
                        Err(e) if is_timeout(&e) => {}
                        other => panic!("read: {other:?}, want a timeout"),
                    }
                }
                wg.done();
            });
        }
        {
            let (c, wg) = (c.clone(), wg.clone());
            goro::go!(move || {
                let b = [0u8; 1];
                for _ in 0..n {
                    let _ = (&*c).write(&b); // ignore possible timeout errors
                }
                wg.done();
            });
        }
        wg.wait();
        drop(l);
    });
}

/// TestConcurrentSetDeadline (net/timeout_test.go): 8 goroutines set the
/// read and write timeouts of the same 10 connections concurrently.
#[test]
fn concurrent_set_deadline() {
    let _w = common::watchdog();
    run(|| {
        const GOROUTINES: u64 = 8;
        const CONNS: u64 = 10;
        let tries = scale(100) as u64;
        let l = local_listener();
        let addr: SocketAddr = l.local_addr().unwrap();
        let c: Arc<Vec<TcpStream>> = Arc::new(
            (0..CONNS)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect(),
        );
        let wg = goro::sync::WaitGroup::new();
        wg.add(GOROUTINES as usize);
        for i in 0..GOROUTINES {
            let (c, wg) = (c.clone(), wg.clone());
            goro::go!(move || {
                for j in (1..=tries).rev() {
                    for k in 0..CONNS {
                        let s = Duration::from_secs(i * j * k);
                        c[k as usize]
                            .set_read_timeout(Some(Duration::from_secs(7200) + s))
                            .unwrap();
                        c[k as usize]
                            .set_write_timeout(Some(Duration::from_secs(3600) + s))
                            .unwrap();
                    }
                }
                wg.done();
            });
        }
        wg.wait();
        drop(l);
    });
}

/// Not a Go test: testVariousDeadlines's tiny timeouts, with data arriving
/// meanwhile and from several goroutines at once (Go runs
/// TestVariousDeadlines in parallel with the other net tests). A peer
/// writes a numbered byte stream in small bursts while the reader reads
/// with a 1 ns .. 1 ms timeout: each read returns data or a timeout, never
/// both and never loses, duplicates or reorders a byte, and the reader
/// gets every byte the writer sent.
#[test]
fn read_timeout_races_data() {
    let _w = common::watchdog();
    run(|| {
        let total = scale(400_000);
        let hs: Vec<_> = (0..4u64)
            .map(|g| {
                goro::go!(move || {
                    let (c, s) = tcp_pair();
                    let writer = goro::go!(move || {
                        let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
                        for (k, chunk) in data.chunks(7).enumerate() {
                            (&s).write_all(chunk).unwrap();
                            if k % 3 == 0 {
                                goro::yield_now();
                            }
                        }
                        s // keep the connection open until the reader is done
                    });
                    let timeouts = [1u64, 2, 50, 500, 1_000, 25_000, 250_000, 1_000_000];
                    let mut got = 0usize;
                    let mut timed_out = 0usize;
                    let mut b = [0u8; 13];
                    let mut i = g as usize;
                    while got < total {
                        let d = Duration::from_nanos(timeouts[i % timeouts.len()]);
                        i += 1;
                        c.set_read_timeout(Some(d)).unwrap();
                        match (&c).read(&mut b) {
                            Ok(0) => panic!("EOF after {got} of {total} bytes"),
                            Ok(n) => {
                                for (j, &x) in b[..n].iter().enumerate() {
                                    assert_eq!(
                                        x,
                                        ((got + j) % 251) as u8,
                                        "byte {} corrupted",
                                        got + j
                                    );
                                }
                                got += n;
                            }
                            Err(e) => {
                                assert!(is_timeout(&e), "{e}");
                                timed_out += 1;
                            }
                        }
                    }
                    drop(writer.join().unwrap());
                    timed_out
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------
// A second operation's timeout behind a parked one (not Go tests)
//
// One goroutine is parked reading (or writing) a socket with no timeout;
// a second one reads (writes) the same socket with a timeout. The second
// waits for the direction's lock (one waiter per poll slot), and its
// timeout must run there: it fails with `TimedOut` while the first stays
// parked, as std's per-call timeouts do in the kernel. Before h33 the
// second waited, untimed, until the first finished.

/// How long a test waits for a timed operation to end before it declares
/// it hung (a watchdog, not a speed limit: the timeouts are 50 ms).
fn watch() -> Duration {
    Duration::from_secs(if qemu() { 60 } else { 10 })
}

/// The result `rx` brings within [`watch`], or closes `c` (ending every
/// operation on it) and panics with `what`.
fn within<T: Send + 'static>(rx: &goro::Receiver<T>, c: &TcpStream, what: &str) -> T {
    match rx.recv_timeout(watch()) {
        Ok(v) => v,
        Err(_) => {
            c.close();
            panic!("{what}: still waiting after {:?}", watch())
        }
    }
}

/// A reader with a timeout behind a parked reader without one, from a
/// goroutine and from a plain thread: each times out, the parked reader
/// stays parked and then reads the byte sent to it.
#[test]
fn second_reader_times_out_behind_a_parked_reader() {
    let _w = common::watchdog();
    run(|| {
        for thread in [false, true] {
            let (c, mut s) = tcp_pair();
            let c = Arc::new(c);
            let c1 = c.clone();
            let a = goro::go!(move || {
                let mut b = [0u8; 1];
                (&*c1).read(&mut b).map(|n| (n, b[0]))
            });
            while !c.__parked(false) {
                goro::yield_now();
            }
            let d = Duration::from_millis(50);
            c.set_read_timeout(Some(d)).unwrap();
            let (tx, rx) = goro::chan(1);
            let c2 = c.clone();
            let second = move || {
                let t0 = Instant::now();
                let r = (&*c2).read(&mut [0u8; 1]);
                tx.send((r, t0.elapsed())).unwrap();
            };
            if thread {
                std::thread::spawn(second);
            } else {
                goro::go!(second);
            }
            let (r, el) = within(&rx, &c, "the second reader behind a parked reader");
            let e = r.expect_err("the second reader got data");
            assert!(is_timeout(&e), "second reader (thread: {thread}): {e}");
            assert!(el >= d, "timed out early: {el:?}");
            assert!(
                c.__parked(false) && !a.is_finished(),
                "the first reader left its wait"
            );
            s.write_all(b"x").unwrap();
            assert_eq!(a.join().unwrap().unwrap(), (1, b'x'));
        }
    });
}

/// The same for writes: a writer parked on a full socket, a second writer
/// with a timeout times out; closing the socket then ends the first.
#[test]
fn second_writer_times_out_behind_a_parked_writer() {
    let _w = common::watchdog();
    run(|| {
        let (c, s) = tcp_pair();
        common::small_buffer(c.as_raw_fd(), libc::SO_SNDBUF);
        common::small_buffer(s.as_raw_fd(), libc::SO_RCVBUF);
        let c = Arc::new(c);
        let c1 = c.clone();
        let a = goro::go!(move || (&*c1).write_all(&vec![1u8; 4 << 20]));
        while !c.__parked(true) {
            assert!(!a.is_finished(), "4 MiB fitted in the socket buffers");
            goro::yield_now();
        }
        let d = Duration::from_millis(50);
        c.set_write_timeout(Some(d)).unwrap();
        let (tx, rx) = goro::chan(1);
        let c2 = c.clone();
        goro::go!(move || {
            let t0 = Instant::now();
            let r = (&*c2).write(&[2u8; 64 << 10]);
            tx.send((r, t0.elapsed())).unwrap();
        });
        let (r, el) = within(&rx, &c, "the second writer behind a parked writer");
        let e = r.expect_err("the second writer wrote");
        assert!(is_timeout(&e), "second writer: {e}");
        assert!(el >= d, "timed out early: {el:?}");
        assert!(
            c.__parked(true) && !a.is_finished(),
            "the first writer left its wait"
        );
        c.close();
        let e = a.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotConnected, "first writer: {e}");
        drop(s);
    });
}

/// `close` ends a reader waiting for the direction's lock (no timeout)
/// as well as the reader parked on the socket: both fail with the closed
/// error.
#[test]
fn close_ends_a_reader_waiting_behind_a_parked_reader() {
    let _w = common::watchdog();
    run(|| {
        let (c, _s) = tcp_pair();
        let c = Arc::new(c);
        let (tx, rx) = goro::chan(2);
        let c1 = c.clone();
        let tx1 = tx.clone();
        goro::go!(move || tx1.send((&*c1).read(&mut [0u8; 1])).unwrap());
        while !c.__parked(false) {
            goro::yield_now();
        }
        let c2 = c.clone();
        let b = goro::go!(move || tx.send((&*c2).read(&mut [0u8; 1])).unwrap());
        common::wait_parked(b.id());
        c.close();
        for i in 0..2 {
            let r = within(&rx, &c, "a reader after close");
            let e = r.expect_err("a reader got data after close");
            assert_eq!(e.kind(), ErrorKind::NotConnected, "reader {i}: {e}");
        }
    });
}

/// Several goroutines and a plain thread read one socket at once with
/// timeouts from 1 µs to 2 ms while the peer writes a numbered stream in
/// bursts: they queue for the read lock, time out in the queue and on
/// the slot, and hand the lock on; every byte is read exactly once and
/// nobody hangs. Then, with all of them waiting (untimed), `close` ends
/// every one.
#[test]
fn contended_timed_readers_lose_nothing() {
    let _w = common::watchdog();
    run(|| {
        let total = scale(200_000);
        let (c, s) = tcp_pair();
        let c = Arc::new(c);
        let writer = goro::go!(move || {
            for (k, chunk) in (0..total)
                .map(|i| (i % 251) as u8)
                .collect::<Vec<u8>>()
                .chunks(5)
                .enumerate()
            {
                (&s).write_all(chunk).unwrap();
                if k % 4 == 0 {
                    goro::yield_now();
                }
            }
            s
        });
        let seen = Arc::new(goro::sync::Mutex::new(vec![0usize; 251]));
        let got = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reader = |r: usize| {
            let (c, seen, got) = (c.clone(), seen.clone(), got.clone());
            move || {
                let timeouts = [1_000u64, 20_000, 300_000, 2_000_000];
                let mut i = r;
                let mut b = [0u8; 3];
                let mut timed_out = 0usize;
                // Each byte's value names its position modulo 251; the
                // readers' reads interleave, so count bytes by value.
                while got.load(std::sync::atomic::Ordering::SeqCst) < total {
                    c.set_read_timeout(Some(Duration::from_nanos(timeouts[i % 4])))
                        .unwrap();
                    i += 1;
                    match (&*c).read(&mut b) {
                        Ok(0) => panic!("EOF"),
                        Ok(n) => {
                            let mut seen = seen.lock();
                            for &x in &b[..n] {
                                seen[x as usize] += 1;
                            }
                            got.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(e) if is_timeout(&e) => timed_out += 1,
                        Err(e) => panic!("reader {r}: {e}"),
                    }
                }
                timed_out
            }
        };
        let hs: Vec<_> = (0..4).map(|r| goro::go!(reader(r))).collect();
        let t = std::thread::spawn(reader(4));
        for h in hs {
            h.join().unwrap();
        }
        goro::blocking(|| t.join().unwrap());
        let seen = seen.lock();
        let want: Vec<usize> = (0..251)
            .map(|v| (0..total).filter(|i| i % 251 == v).count())
            .collect();
        for v in 0..251 {
            assert_eq!(seen[v], want[v], "byte value {v}");
        }
        assert_eq!(got.load(std::sync::atomic::Ordering::SeqCst), total);
        drop(seen);
        // Untimed readers, queued behind one another; close ends them all.
        c.set_read_timeout(None).unwrap();
        let (tx, rx) = goro::chan(4);
        let waiter = |tx: goro::Sender<std::io::Result<usize>>| {
            let c = c.clone();
            move || tx.send((&*c).read(&mut [0u8; 1])).unwrap()
        };
        let hs: Vec<_> = (0..3).map(|_| goro::go!(waiter(tx.clone()))).collect();
        std::thread::spawn(waiter(tx));
        for h in &hs {
            common::wait_parked(h.id());
        }
        c.close();
        for i in 0..4 {
            let e = within(&rx, &c, "a waiting reader after close").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotConnected, "reader {i}: {e}");
        }
        drop(writer.join().unwrap());
    });
}
