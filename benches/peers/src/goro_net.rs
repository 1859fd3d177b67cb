//! goro rows of the network workloads, `echo10k` and `idleconn` (issue 8).
//! Shapes mirror netEcho / netIdle in benches/go/main.go line for line.
//!
//! Each run is two processes of this binary: the server (the measured
//! process for `idleconn`) and a client child started with
//! `PEERS_NET_CLIENT=ADDR`. Two processes because 10,000 connections need
//! 20,000 fds in one, and RLIMIT_NOFILE's hard limit is often exactly that.

use crate::common::*;
use goro::net::{TcpListener, TcpStream};
use std::io::{BufRead, Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(procs: usize) -> goro::Config {
    goro::Config::from_env().max_procs(procs)
}

pub fn run(w: &Work) -> Res {
    raise_nofile();
    let (name, n, procs) = (w.name, w.n, w.procs);
    if let Ok(addr) = std::env::var(NET_CLIENT_ENV) {
        return match name {
            "echo10k" => goro::run_with(config(procs), move || echo_client(&addr, n)),
            _ => idle_client(&addr, n),
        };
    }
    match name {
        "echo10k" => goro::run_with(config(procs), move || echo_server(n, procs)),
        _ => goro::run_with(config(procs), move || idle_server(n, procs)),
    }
}

// ---- echo10k ----

/// Echo server, one goroutine per connection running `goro::io::copy(c,
/// c)` (Go: the generic path of io.Copy, a 32 KiB buffer). The client child
/// opens `net_conns()` connections and does `k` round trips on each; its
/// measurement is the value: total round trips per second (higher is
/// better).
fn echo_server(k: u64, procs: usize) -> Res {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    drop(goro::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            drop(goro::spawn(move || {
                let _ = c.set_nodelay(true); // Go's default
                let _ = goro::io::copy(&mut &c, &mut &c);
            }));
        }
    }));
    let child = net_client_cmd("echo10k", "goro", addr, k, procs)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn client: {e}"))?;
    // A client whose server dies fails on its next read (reset) and exits.
    let out = goro::blocking(move || child.wait_with_output()).map_err(|e| e.to_string())?;
    parse_client_output(&out)
}

/// The echo10k client: `net_conns()` goroutines connect (at most 512
/// connecting at once: a SYN burst beyond the accept backlog only adds 1 s
/// retransmissions), each checks one round trip, and all wait at a
/// barrier; the clock runs from releasing them to the last finishing `k`
/// round trips of 32 bytes (each echo checked byte for byte).
fn echo_client(addr: &str, k: u64) -> Res {
    let conns = net_conns();
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    let connected = goro::sync::WaitGroup::new();
    let finished = goro::sync::WaitGroup::new();
    let connecting = Arc::new(goro::sync::Semaphore::new(512));
    let bad = Arc::new(AtomicU64::new(0));
    let (start_tx, start_rx) = goro::chan::<()>(0);
    connected.add(conns);
    finished.add(conns);
    let t_connect = Instant::now();
    for i in 0..conns {
        let (connected, finished, connecting, bad, start_rx) = (
            connected.clone(),
            finished.clone(),
            connecting.clone(),
            bad.clone(),
            start_rx.clone(),
        );
        drop(goro::spawn(move || {
            connecting.acquire();
            let c = TcpStream::connect(addr);
            connecting.release();
            let mut c = c.unwrap_or_else(|e| panic!("connect: {e}"));
            c.set_nodelay(true).unwrap(); // Go's default
            let check = |c: &mut TcpStream, k: u64| {
                let msg = echo_msg(i, k);
                let mut got = [0u8; 32];
                c.write_all(&msg).unwrap();
                c.read_exact(&mut got).unwrap();
                if got != msg {
                    bad.fetch_add(1, SeqCst);
                }
            };
            check(&mut c, u64::MAX); // warm-up, before the clock
            connected.done();
            let _ = start_rx.recv(); // closed: go
            for r in 0..k {
                check(&mut c, r);
            }
            finished.done();
        }));
    }
    connected.wait();
    let connect_s = t_connect.elapsed().as_secs_f64();
    let t = Instant::now();
    drop(start_tx); // closing releases every client
    finished.wait();
    let d = t.elapsed();
    print_client_line(bad.load(SeqCst), conns, k, d, connect_s)
}

// ---- idleconn ----

/// RSS per idle connection: `n` accepted connections, each held by a
/// goroutine parked in a read of a 64-byte buffer. Value: (ΔVmRSS +
/// ΔVmPTE) / n in KiB, both measured in this (the server) process from
/// after the listener is up to 50 ms after the n-th goroutine started.
fn idle_server(n: u64, procs: usize) -> Res {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let started = Arc::new(AtomicU64::new(0));
    let s2 = started.clone();
    drop(goro::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let started = s2.clone();
            drop(goro::spawn(move || {
                started.fetch_add(1, SeqCst);
                let mut buf = [0u8; 64];
                // Parks until the client exits (EOF or reset).
                let _ = c.read(&mut buf);
            }));
        }
    }));
    goro::time::sleep(Duration::from_millis(20));
    let (rss0, pte0) = (vm_status_kib("VmRSS"), vm_status_kib("VmPTE"));
    let mut child = goro::blocking(|| {
        net_client_cmd("idleconn", "goro", addr, n, procs)
            .stdout(Stdio::null())
            .spawn()
    })
    .map_err(|e| format!("spawn client: {e}"))?;
    let t = Instant::now();
    while started.load(SeqCst) < n {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = goro::blocking(|| child.wait());
            return Err(format!(
                "only {} of {n} connections after 60 s",
                started.load(SeqCst)
            ));
        }
        goro::time::sleep(Duration::from_millis(1));
    }
    goro::time::sleep(Duration::from_millis(50));
    let (rss1, pte1) = (vm_status_kib("VmRSS"), vm_status_kib("VmPTE"));
    drop(child.stdin.take()); // the client exits on EOF
    let _ = goro::blocking(|| child.wait());
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64;
    Ok(Out {
        value: per(rss1 + pte1, rss0 + pte0),
        extra: Vec::new(),
    }
    .with("unit", "KiB/conn")
    .with("rss_kib_per_conn", format!("{:.2}", per(rss1, rss0)))
    .with("pte_kib_per_conn", format!("{:.2}", per(pte1, pte0)))
    .with("rss_before_kb", rss0)
    .with("rss_after_kb", rss1))
}

/// The idleconn client: `n` plain blocking connects in a row (no runtime:
/// only the server is measured), then waits for stdin to close.
fn idle_client(addr: &str, n: u64) -> Res {
    let mut held = Vec::with_capacity(n as usize);
    for _ in 0..n {
        held.push(std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?);
    }
    let _ = std::io::stdin().lock().read_line(&mut String::new());
    drop(held);
    Ok(Out {
        value: 0.0,
        extra: Vec::new(),
    })
}
