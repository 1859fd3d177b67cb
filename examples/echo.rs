//! TCP echo server, one goroutine per connection (Go's classic
//! `for { c := l.Accept(); go io.Copy(c, c) }`).
//!
//!     cargo run --release --example echo -- 127.0.0.1:7000
//!
//! Prints `listening on ADDR` once ready. Try it with
//! `nc 127.0.0.1 7000`. Ctrl-C (SIGINT) or SIGTERM ends it with a count of
//! the connections served (Go's `signal.Notify`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static SERVED: AtomicU64 = AtomicU64::new(0);

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".to_string());
    goro::run(move || {
        let l = goro::net::TcpListener::bind(&addr).unwrap_or_else(|e| {
            eprintln!("echo: bind {addr}: {e}");
            std::process::exit(1)
        });
        let (sig_tx, sig_rx) = goro::chan(1);
        use goro::signal::Signal;
        goro::signal::notify(&sig_tx, &[Signal::SIGINT, Signal::SIGTERM]).unwrap();
        goro::go!(move || {
            let sig = sig_rx.recv().unwrap();
            eprintln!("echo: {sig}: served {} connections", SERVED.load(Relaxed));
            std::process::exit(0)
        });
        println!("listening on {}", l.local_addr().unwrap());
        // incoming() survives EMFILE (logs once, backs off, keeps serving).
        for conn in l.incoming() {
            match conn {
                Ok(c) => {
                    SERVED.fetch_add(1, Relaxed);
                    goro::go!(move || echo(c));
                }
                Err(e) => eprintln!("echo: accept: {e}"),
            }
        }
    });
}

/// Copies everything the peer sends back to it until EOF or an error (Go's
/// `io.Copy(c, c)`; a reset peer ends this connection only).
fn echo(c: goro::net::TcpStream) {
    let _ = goro::io::copy(&mut &c, &mut &c);
}
