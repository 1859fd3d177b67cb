//! tokio row of `echo10k` (issue 8): the shape of goro_net.rs's echo10k,
//! with one task per connection on a multi-thread runtime of `procs`
//! workers, server and client child alike.

use crate::common::*;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn runtime(procs: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(procs)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime build failed: {e}"))
}

pub fn run(w: &Work) -> Res {
    if w.name != "echo10k" {
        return not_applicable("idleconn is measured for goro and Go");
    }
    raise_nofile();
    let rt = runtime(w.procs)?;
    match std::env::var(NET_CLIENT_ENV) {
        Ok(addr) => rt.block_on(echo_client(addr, w.n)),
        Err(_) => rt.block_on(echo_server(w.n, w.procs)),
    }
}

/// Echo server: one task per connection copying it to itself with
/// `tokio::io::copy` on its split halves.
async fn echo_server(k: u64, procs: usize) -> Res {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    listen_max(std::os::fd::AsRawFd::as_raw_fd(&l));
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = c.set_nodelay(true);
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let child = net_client_cmd("echo10k", "tokio", addr, k, procs)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn client: {e}"))?;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    parse_client_output(&out)
}

/// The client: `net_conns()` tasks connect (at most 512 at once), check one
/// round trip, wait at a barrier; the clock runs from the release to the
/// last task finishing `k` checked round trips of 32 bytes.
async fn echo_client(addr: String, k: u64) -> Res {
    let conns = net_conns();
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    let connecting = Arc::new(tokio::sync::Semaphore::new(512));
    let connected = Arc::new(tokio::sync::Barrier::new(conns + 1));
    let bad = Arc::new(AtomicU64::new(0));
    let (start_tx, start_rx) = tokio::sync::watch::channel(false);
    let t_connect = Instant::now();
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let (connecting, connected, bad, mut start_rx) = (
            connecting.clone(),
            connected.clone(),
            bad.clone(),
            start_rx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let permit = connecting.acquire().await.unwrap();
            let c = TcpStream::connect(addr).await;
            drop(permit);
            let mut c = c.unwrap_or_else(|e| panic!("connect: {e}"));
            c.set_nodelay(true).unwrap();
            let mut got = [0u8; 32];
            let msg = echo_msg(i, u64::MAX); // warm-up, before the clock
            c.write_all(&msg).await.unwrap();
            c.read_exact(&mut got).await.unwrap();
            if got != msg {
                bad.fetch_add(1, SeqCst);
            }
            connected.wait().await;
            let _ = start_rx.wait_for(|go| *go).await;
            for r in 0..k {
                let msg = echo_msg(i, r);
                c.write_all(&msg).await.unwrap();
                c.read_exact(&mut got).await.unwrap();
                if got != msg {
                    bad.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    connected.wait().await;
    let connect_s = t_connect.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = start_tx.send(true);
    for h in tasks {
        h.await.map_err(|e| format!("client task: {e}"))?;
    }
    let d = t.elapsed();
    print_client_line(bad.load(SeqCst), conns, k, d, connect_s)
}
