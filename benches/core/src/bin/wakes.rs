//! The memory cost of a wake-up, for `benches/misses.sh` (cachegrind):
//! deterministic where wall-clock figures on a shared machine are not.
//!
//!     wakes net N ROUNDS    N goroutines each parked in a read on its own
//!                           Unix socket; each round writes one byte to every
//!                           socket and reads every echo: N netpoll wake-ups
//!                           per round, as an HTTP server under wrk with N
//!                           connections.
//!     wakes netdl N ROUNDS  the same, every server read with a 10 s read
//!                           timeout (`set_read_timeout`, Go's
//!                           SetReadDeadline before each read).
//!     wakes ring N HOPS     threadring: a token passed HOPS times around N
//!                           goroutines over unbuffered channels.
//!
//! Run at GOMAXPROCS=1. The difference between two runs with different
//! ROUNDS/HOPS, divided by the extra wake-ups, is the cost per wake-up.

use std::io::{Read, Write};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: wakes net|netdl N ROUNDS | wakes ring N HOPS");
        std::process::exit(2)
    };
    if args.len() != 4 {
        usage();
    }
    let n: usize = args[2].parse().unwrap_or_else(|_| usage());
    let k: usize = args[3].parse().unwrap_or_else(|_| usage());
    match args[1].as_str() {
        "net" => goro::run(move || net(n, k, None)),
        "netdl" => goro::run(move || net(n, k, Some(std::time::Duration::from_secs(10)))),
        "ring" => goro::run(move || ring(n, k)),
        _ => usage(),
    }
}

fn net(n: usize, rounds: usize, timeout: Option<std::time::Duration>) {
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let (a, mut b) = goro::net::UnixStream::pair().expect("socketpair");
        b.set_read_timeout(timeout).expect("set_read_timeout");
        goro::go!(move || {
            let mut buf = [0u8; 64];
            while let Ok(k @ 1..) = b.read(&mut buf) {
                if b.write_all(&buf[..k]).is_err() {
                    return;
                }
            }
        });
        socks.push(a);
    }
    let mut sum = 0u64;
    for r in 0..rounds {
        for s in socks.iter_mut() {
            s.write_all(&[r as u8]).unwrap();
        }
        for s in socks.iter_mut() {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            sum += u64::from(b[0]);
        }
    }
    println!("net: {n} goroutines, {rounds} rounds, sum {sum}");
}

fn ring(n: usize, hops: usize) {
    let (first_tx, mut rx) = goro::chan::<usize>(0);
    let (done_tx, done_rx) = goro::chan::<()>(0);
    for i in 0..n {
        let (tx, next_rx) = if i + 1 < n {
            let (tx, r) = goro::chan::<usize>(0);
            (tx, Some(r))
        } else {
            (first_tx.clone(), None)
        };
        let done = done_tx.clone();
        goro::go!(move || {
            for v in rx.iter() {
                if v == 0 {
                    done.send(()).unwrap();
                    return;
                }
                if tx.send(v - 1).is_err() {
                    return;
                }
            }
        });
        match next_rx {
            Some(r) => rx = r,
            None => break,
        }
    }
    first_tx.send(hops).unwrap();
    done_rx.recv().unwrap();
    println!("ring: {n} goroutines, {hops} hops");
    // The other goroutines stay parked on their channels.
    std::process::exit(0);
}
