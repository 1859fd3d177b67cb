//! Criterion microbenchmarks of goro's core paths (single process).
//! Side-by-side comparison with Go, may and tokio: benches/compare.sh.
//! Run: `cargo bench -p goro-bench-core` (from the repository root).

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;

fn raw_switch(c: &mut Criterion) {
    c.bench_function("raw_switch_round_trip", |b| {
        b.iter_custom(goro::__bench::raw_switch_pair)
    });
}

fn yield_pingpong(c: &mut Criterion) {
    goro::start(goro::Config::from_env().max_procs(1)).ok();
    c.bench_function("gosched_pingpong_1p", |b| {
        b.iter_custom(|iters| {
            goro::run(move || {
                let t0 = std::time::Instant::now();
                let h = goro::go!(move || {
                    for _ in 0..iters {
                        goro::yield_now();
                    }
                });
                for _ in 0..iters {
                    goro::yield_now();
                }
                h.join().unwrap();
                t0.elapsed() / 2
            })
        })
    });
}

fn chan_sync(c: &mut Criterion) {
    c.bench_function("chan_sync_pingpong", |b| {
        b.iter_custom(|iters| {
            goro::run(move || {
                let (tx, rx) = goro::chan::<u64>(0);
                let (tx2, rx2) = goro::chan::<u64>(0);
                let t0 = std::time::Instant::now();
                let h = goro::go!(move || {
                    for v in rx.iter() {
                        tx2.send(v).unwrap();
                    }
                });
                for i in 0..iters {
                    tx.send(i).unwrap();
                    rx2.recv().unwrap();
                }
                drop(tx);
                h.join().unwrap();
                t0.elapsed()
            })
        })
    });
}

fn spawn_exit(c: &mut Criterion) {
    c.bench_function("spawn_join", |b| {
        b.iter_custom(|iters| {
            goro::run(move || {
                let t0 = std::time::Instant::now();
                for _ in 0..iters {
                    goro::go!(|| ()).join().unwrap();
                }
                t0.elapsed()
            })
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = raw_switch, yield_pingpong, chan_sync, spawn_exit
}
criterion_main!(benches);
