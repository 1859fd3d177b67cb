//! A tour of the runtime in one command: each step prints what it did, how
//! long it took, and the scheduler's state after it (Go's SCHED line, from
//! `goro::stats()`).
//!
//!     cargo run --release --example tour            # 100,000 parked goroutines
//!     cargo run --release --example tour -- 1000000 # Go's million (≈ 4 GB RSS)
//!
//! The last four steps are recorded as an execution trace (the path is
//! printed at the end). Steps: Go's prime sieve; the thread ring; N goroutines parked on one
//! channel and released by closing it; a CPU loop preempted beside a 10 ms
//! ticker (SIGURG); eight goroutines blocking in the kernel, guarded and not
//! (syscall hand-off and blocking detection); an echo server on goro::net
//! under 200 concurrent clients.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn sched_line() -> String {
    let s = goro::stats();
    let runqs: Vec<String> = s.local_runq.iter().map(|n| n.to_string()).collect();
    format!(
        "SCHED: gomaxprocs={} idleprocs={} threads={} spinningthreads={} idlethreads={} runqueue={} [{}] \
         goroutines={} preemptions={} (async {}) handoffs={} detected={}",
        s.gomaxprocs,
        s.idle_procs,
        s.threads,
        s.spinning_threads,
        s.idle_threads,
        s.global_runq,
        runqs.join(" "),
        s.goroutines,
        s.preemptions,
        s.preemptions_async,
        s.syscalls_handed_off,
        s.retakes_detected,
    )
}

fn step<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let v = f();
    println!("  {:<58} {:>9.1} ms", name, t.elapsed().as_secs_f64() * 1e3);
    println!("    {}", sched_line());
    v
}

/// Go's concurrent prime sieve: the n-th prime.
fn sieve(n: usize) -> u64 {
    let (tx, mut rx) = goro::chan::<u64>(0);
    goro::go!(move || {
        let mut i = 2;
        while tx.send(i).is_ok() {
            i += 1;
        }
    });
    let mut p = 0;
    for _ in 0..n {
        p = rx.recv().unwrap();
        let (tx2, rx2) = goro::chan::<u64>(0);
        let src = rx;
        goro::go!(move || {
            for v in src.iter() {
                if v % p != 0 && tx2.send(v).is_err() {
                    return;
                }
            }
        });
        rx = rx2;
    }
    p
}

/// The benchmarks-game thread ring: 503 goroutines pass a token `n` times.
fn thread_ring(n: u64) -> usize {
    const RING: usize = 503;
    let chans: Vec<_> = (0..RING).map(|_| goro::chan::<u64>(0)).collect();
    let (done_tx, done_rx) = goro::chan::<usize>(1);
    for id in 0..RING {
        let rx = chans[id].1.clone();
        let tx = chans[(id + 1) % RING].0.clone();
        let done = done_tx.clone();
        goro::go!(move || ring_member(id + 1, rx, tx, done));
    }
    chans[0].0.send(n).unwrap();
    done_rx.recv().unwrap()
}

fn ring_member(
    id: usize,
    rx: goro::Receiver<u64>,
    tx: goro::Sender<u64>,
    done: goro::Sender<usize>,
) {
    for t in rx.iter() {
        if t == 0 {
            let _ = done.send(id);
            return;
        }
        if tx.send(t - 1).is_err() {
            return;
        }
    }
}

fn main() {
    let parked: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(100_000);
    let trace_path = std::env::temp_dir().join("goro-tour-trace.json");
    println!("goro tour (GOMAXPROCS={})", goro::max_procs());

    let trace_path2 = trace_path.clone();
    goro::run(move || {
        let trace_path = trace_path2;
        let p = step("sieve: the 2,000th prime by a chain of goroutines", || {
            sieve(2000)
        });
        println!("    -> {p}");

        let id = step(
            "thread ring: 503 goroutines pass a token 1,000,000 times",
            || thread_ring(1_000_000),
        );
        println!("    -> goroutine {id} holds the token at zero");

        step(
            &format!("{parked} goroutines parked on a channel, then released"),
            || {
                let (tx, rx) = goro::chan::<()>(0);
                let hs: Vec<_> = (0..parked)
                    .map(|_| {
                        let rx = rx.clone();
                        goro::go!(move || {
                            let _ = rx.recv();
                        })
                    })
                    .collect();
                while goro::num_goroutine() < parked {
                    goro::yield_now();
                }
                println!(
                    "    {} goroutines alive, {}",
                    goro::num_goroutine(),
                    sched_line()
                );
                drop(tx); // closing the channel releases every receiver
                for h in hs {
                    h.join().unwrap();
                }
            },
        );

        // The last steps are traced (the ones above would write millions
        // of events).
        goro::trace::start(&trace_path).expect("start the trace");
        step(
            "a CPU loop (no runtime calls) beside a 10 ms ticker",
            || {
                let stop = Arc::new(AtomicBool::new(false));
                let hogs: Vec<_> = (0..goro::max_procs())
                    .map(|_| {
                        let stop = stop.clone();
                        goro::go!(move || {
                            let mut x = 1u64;
                            while !stop.load(Ordering::Relaxed) {
                                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                            }
                            x
                        })
                    })
                    .collect();
                let tick = goro::time::tick(Duration::from_millis(10));
                let mut worst = Duration::ZERO;
                let mut last = Instant::now();
                for _ in 0..30 {
                    tick.recv().unwrap();
                    worst = worst.max(last.elapsed());
                    last = Instant::now();
                }
                stop.store(true, Ordering::Relaxed);
                for h in hogs {
                    h.join().unwrap();
                }
                println!(
                    "    -> 30 ticks, longest gap {:.1} ms (the loops were preempted)",
                    worst.as_secs_f64() * 1e3
                );
            },
        );

        for guarded in [true, false] {
            let name = if guarded {
                "8 goroutines x 5 x 50 ms sleeps in the kernel, in goro::blocking"
            } else {
                "the same with a bare std::thread::sleep (blocking detection)"
            };
            step(name, || {
                let hs: Vec<_> = (0..8)
                    .map(|_| {
                        goro::go!(move || {
                            for _ in 0..5 {
                                if guarded {
                                    goro::blocking(|| {
                                        std::thread::sleep(Duration::from_millis(50))
                                    });
                                } else {
                                    std::thread::sleep(Duration::from_millis(50));
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
            });
        }

        step(
            "echo server (goro::net): 200 clients x 100 round trips",
            || {
                let l = goro::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = l.local_addr().unwrap();
                goro::go!(move || {
                    for s in l.incoming() {
                        let Ok(mut s) = s else { continue };
                        goro::go!(move || {
                            let mut buf = [0u8; 4096];
                            while let Ok(n) = s.read(&mut buf) {
                                if n == 0 || s.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        });
                    }
                });
                let bytes = Arc::new(AtomicU64::new(0));
                let hs: Vec<_> = (0..200)
                    .map(|i| {
                        let bytes = bytes.clone();
                        goro::go!(move || {
                            let mut c = goro::net::TcpStream::connect(addr).unwrap();
                            let msg = format!("hello from client {i:04}");
                            let mut back = vec![0u8; msg.len()];
                            for _ in 0..100 {
                                c.write_all(msg.as_bytes()).unwrap();
                                c.read_exact(&mut back).unwrap();
                                assert_eq!(back, msg.as_bytes());
                                bytes.fetch_add(back.len() as u64, Ordering::Relaxed);
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                println!(
                    "    -> {} bytes echoed, every byte checked",
                    bytes.load(Ordering::Relaxed)
                );
            },
        );
    });

    goro::trace::stop().expect("write the trace");
    println!(
        "\nExecution trace: {}\nOpen it at https://ui.perfetto.dev (\"Open trace file\") or in chrome://tracing:\n\
         one track per P, a slice per goroutine run, and spawn/park/unpark/preempt/steal events.",
        trace_path.display()
    );
}
