//! may row of `echo10k` (issue 8): the shape of goro_net.rs's echo10k,
//! with one coroutine per connection on `procs` may workers, server and
//! client child alike.

use crate::common::*;
use may::net::{TcpListener, TcpStream};
use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Instant;

pub fn run(w: &Work) -> Res {
    if w.name != "echo10k" {
        return not_applicable("idleconn is measured for goro and Go");
    }
    raise_nofile();
    may::config().set_workers(w.procs);
    let (k, procs) = (w.n, w.procs);
    let body = move || match std::env::var(NET_CLIENT_ENV) {
        Ok(addr) => echo_client(&addr, k),
        Err(_) => echo_server(k, procs),
    };
    match may::go!(body).join() {
        Ok(r) => r,
        Err(_) => Err("panicked".into()),
    }
}

/// Echo server: one coroutine per connection copying it to itself
/// (read into a 32 KiB buffer, write it back) over may's
/// coroutine-blocking stream; one stream, no `try_clone`.
fn echo_server(k: u64, procs: usize) -> Res {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    listen_max(std::os::fd::AsRawFd::as_raw_fd(&l));
    drop(may::go!(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            drop(may::go!(move || {
                let mut c = c;
                let _ = c.set_nodelay(true);
                // io::Copy's generic path (as Go's row): a 32 KiB buffer.
                let mut buf = vec![0u8; 32 << 10];
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if c.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            }));
        }
    }));
    let child = net_client_cmd("echo10k", "may", addr, k, procs)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn client: {e}"))?;
    // Wait on a plain thread: blocking a may worker stalls the
    // connections whose events it owns.
    let (tx, rx) = may::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv()
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    parse_client_output(&out)
}

/// The client: `net_conns()` coroutines connect (at most 512 at once),
/// check one round trip, wait at a barrier; the clock runs from the
/// release to the last coroutine finishing `k` checked round trips of 32
/// bytes.
fn echo_client(addr: &str, k: u64) -> Res {
    let conns = net_conns();
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    let connecting = Arc::new(may::sync::Semphore::new(512));
    let connected = Arc::new(may::sync::Barrier::new(conns + 1));
    let bad = Arc::new(AtomicU64::new(0));
    let (start_tx, start_rx) = may::sync::mpmc::channel::<()>();
    let t_connect = Instant::now();
    let mut hs = Vec::with_capacity(conns);
    for i in 0..conns {
        let (connecting, connected, bad, start_rx) = (
            connecting.clone(),
            connected.clone(),
            bad.clone(),
            start_rx.clone(),
        );
        hs.push(may::go!(move || {
            connecting.wait();
            let c = TcpStream::connect(addr);
            connecting.post();
            let mut c = c.unwrap_or_else(|e| panic!("connect: {e}"));
            c.set_nodelay(true).unwrap();
            let mut check = |k: u64| {
                let msg = echo_msg(i, k);
                let mut got = [0u8; 32];
                c.write_all(&msg).unwrap();
                c.read_exact(&mut got).unwrap();
                if got != msg {
                    bad.fetch_add(1, SeqCst);
                }
            };
            check(u64::MAX); // warm-up, before the clock
            connected.wait();
            let _ = start_rx.recv(); // disconnected: go
            for r in 0..k {
                check(r);
            }
        }));
    }
    drop(start_rx);
    connected.wait();
    let connect_s = t_connect.elapsed().as_secs_f64();
    let t = Instant::now();
    drop(start_tx); // disconnecting releases every client
    for h in hs {
        h.join()
            .map_err(|_| "client coroutine panicked".to_string())?;
    }
    let d = t.elapsed();
    print_client_line(bad.load(SeqCst), conns, k, d, connect_s)
}
