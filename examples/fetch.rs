//! HTTP/1.1 keep-alive load generator: N goroutines, one connection each,
//! sending `GET` requests back to back for a few seconds, then reporting
//! requests/s (a tiny wrk for goro's own examples).
//!
//!     cargo run --release --example fetch -- http://127.0.0.1:8080/ 100 [SECONDS]
//!
//! Each response must be `200` with a 13-byte body; anything else counts as
//! an error and ends that connection.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080/".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let rest = url.strip_prefix("http://").unwrap_or_else(|| {
        eprintln!("fetch: only http:// URLs");
        std::process::exit(2)
    });
    let (host, path) = match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    let done = Arc::new(AtomicBool::new(false));
    let reqs = Arc::new(AtomicU64::new(0));
    let errs = Arc::new(AtomicU64::new(0));
    let (d, r, e) = (done.clone(), reqs.clone(), errs.clone());
    let elapsed = goro::run(move || {
        let wg = Arc::new(goro::sync::WaitGroup::new());
        let start = Instant::now();
        for _ in 0..n {
            let (host, req, d, r, e, wg) = (
                host.clone(),
                req.clone(),
                d.clone(),
                r.clone(),
                e.clone(),
                wg.clone(),
            );
            wg.add(1);
            goro::go!(move || {
                if let Err(err) = client(&host, &req, &d, &r) {
                    if e.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("fetch: {err}");
                    }
                }
                wg.done();
            });
        }
        goro::time::sleep(Duration::from_secs_f64(secs));
        d.store(true, Ordering::Relaxed);
        let el = start.elapsed();
        wg.wait();
        el
    });
    let total = reqs.load(Ordering::Relaxed);
    println!(
        "{total} requests in {:.2}s over {n} connections: {:.0} requests/s, {} errors",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        errs.load(Ordering::Relaxed)
    );
}

/// One connection: request, read one full response, repeat until `done`.
fn client(host: &str, req: &[u8], done: &AtomicBool, reqs: &AtomicU64) -> std::io::Result<()> {
    let mut c = goro::net::TcpStream::connect(host)?;
    let mut buf = vec![0u8; 4096];
    while !done.load(Ordering::Relaxed) {
        c.write_all(req)?;
        let mut len = 0;
        loop {
            let n = c.read(&mut buf[len..])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            len += n;
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf[..len]) {
                Ok(httparse::Status::Complete(h)) => {
                    if resp.code != Some(200) {
                        return Err(std::io::Error::other("non-200 response"));
                    }
                    if len >= h + 13 {
                        break;
                    }
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
            if len == buf.len() {
                return Err(std::io::Error::other("response too large"));
            }
        }
        reqs.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
