//! Minimal HTTP/1.1 keep-alive server: one goroutine per connection,
//! every request answered with `200 OK` and `Hello, World!`.
//!
//!     cargo run --release --example http_hello -- 127.0.0.1:8080
//!
//! Requests are parsed with `httparse`; pipelined requests are answered in
//! order (responses for one read are written with one `write_all`),
//! `Connection: close` (and HTTP/1.0 without keep-alive) closes after the
//! response, a malformed request gets `400 Bad Request` and the connection
//! is closed. Prints `listening on ADDR` once ready.

use std::io::{Read, Write};

const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
const OK_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nHello, World!";
const BAD: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// Largest request head accepted; a longer one is a 400.
const MAX_HEAD: usize = 16 << 10;

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    goro::run(move || {
        let l = goro::net::TcpListener::bind(&addr).unwrap_or_else(|e| {
            eprintln!("http_hello: bind {addr}: {e}");
            std::process::exit(1)
        });
        println!("listening on {}", l.local_addr().unwrap());
        let _ = std::io::stdout().flush();
        for conn in l.incoming() {
            match conn {
                Ok(c) => {
                    goro::go!(move || serve(c));
                }
                Err(e) => eprintln!("http_hello: accept: {e}"),
            }
        }
    });
}

/// Serves one connection until the peer closes, asks to close, or errs.
fn serve(mut c: goro::net::TcpStream) {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    let mut out = Vec::with_capacity(4096);
    loop {
        if len == buf.len() {
            if buf.len() >= MAX_HEAD {
                let _ = c.write_all(BAD);
                return;
            }
            buf.resize(buf.len() * 2, 0);
        }
        match c.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => len += n,
        }
        // Answer every complete request in the buffer (pipelining).
        let mut start = 0;
        let mut close = false;
        while start < len {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf[start..len]) {
                Ok(httparse::Status::Complete(n)) => {
                    // Request bodies are not expected; skip a declared one
                    // only if it is entirely buffered, else treat as bad.
                    let body = content_length(req.headers);
                    let keep = keep_alive(&req);
                    match body {
                        Some(b) if start + n + b <= len => start += n + b,
                        None => start += n,
                        Some(_) => {
                            out.extend_from_slice(BAD);
                            close = true;
                            break;
                        }
                    }
                    if keep {
                        out.extend_from_slice(OK);
                    } else {
                        out.extend_from_slice(OK_CLOSE);
                        close = true;
                        break;
                    }
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => {
                    out.extend_from_slice(BAD);
                    close = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            if c.write_all(&out).is_err() {
                return;
            }
            out.clear();
        }
        if close {
            let _ = c.shutdown(std::net::Shutdown::Write);
            return;
        }
        buf.copy_within(start..len, 0);
        len -= start;
    }
}

/// The Content-Length header: None if absent, Some(usize::MAX) if invalid.
fn content_length(h: &[httparse::Header]) -> Option<usize> {
    h.iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| {
            std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(usize::MAX / 2)
        })
}

/// HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0
/// closes unless `Connection: keep-alive`.
fn keep_alive(req: &httparse::Request) -> bool {
    let conn = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("connection"))
        .map(|h| h.value.to_ascii_lowercase());
    match req.version {
        Some(1) => conn.as_deref() != Some(b"close".as_slice()),
        _ => conn.as_deref() == Some(b"keep-alive".as_slice()),
    }
}
