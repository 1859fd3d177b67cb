//! Minimal HTTP/1.1 keep-alive servers for `benches/compare.sh http`:
//! the tokio and may counterparts of goro's `examples/http_hello.rs` and
//! `benches/go/http_hello/http_hello.go`. One task/coroutine per
//! connection, requests parsed with `httparse` (as goro's example does),
//! pipelined requests answered with one write per read, a fixed
//! `200 OK` / `Hello, World!` response.
//!
//! Usage: `http_server <tokio|may> ADDR [WORKERS]` (default 2 workers);
//! prints `listening on ADDR` once ready.

use std::io::{Read, Write};

const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

/// Appends one response per complete request in `buf`; returns the bytes
/// consumed, or None on a malformed request (close the connection).
fn respond(buf: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let mut start = 0;
    while start < buf.len() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[start..]) {
            Ok(httparse::Status::Complete(n)) => {
                start += n;
                out.extend_from_slice(OK);
            }
            Ok(httparse::Status::Partial) => break,
            Err(_) => return None,
        }
    }
    Some(start)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let imp = args.next().unwrap_or_default();
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    match imp.as_str() {
        "tokio" => tokio_main(&addr, workers),
        "may" => may_main(&addr, workers),
        _ => {
            eprintln!("usage: http_server <tokio|may> ADDR [WORKERS]");
            std::process::exit(2);
        }
    }
}

fn tokio_main(addr: &str, workers: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = tokio::net::TcpListener::bind(addr).await.unwrap();
        println!("listening on {}", l.local_addr().unwrap());
        std::io::stdout().flush().unwrap();
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = c.set_nodelay(true);
                let mut buf = vec![0u8; 4096];
                let mut out = Vec::with_capacity(4096);
                let mut len = 0;
                loop {
                    if len == buf.len() {
                        return;
                    }
                    match c.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => len += n,
                    }
                    let Some(used) = respond(&buf[..len], &mut out) else {
                        return;
                    };
                    if !out.is_empty() {
                        if c.write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                    }
                    buf.copy_within(used..len, 0);
                    len -= used;
                }
            });
        }
    });
}

fn may_main(addr: &str, workers: usize) {
    may::config().set_workers(workers);
    let l = may::net::TcpListener::bind(addr).unwrap();
    println!("listening on {}", l.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let h = may::go!(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            may::go!(move || {
                let _ = c.set_nodelay(true);
                let mut buf = vec![0u8; 4096];
                let mut out = Vec::with_capacity(4096);
                let mut len = 0;
                loop {
                    if len == buf.len() {
                        return;
                    }
                    match c.read(&mut buf[len..]) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => len += n,
                    }
                    let Some(used) = respond(&buf[..len], &mut out) else {
                        return;
                    };
                    if !out.is_empty() {
                        if c.write_all(&out).is_err() {
                            return;
                        }
                        out.clear();
                    }
                    buf.copy_within(used..len, 0);
                    len -= used;
                }
            });
        }
    });
    let _ = h.join();
}
