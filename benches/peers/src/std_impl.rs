//! std rows: one OS thread per "goroutine", crossbeam-channel for Go channel
//! semantics (MPMC, bounded(0) = rendezvous, select!). The process is pinned
//! to PROCS CPUs with sched_setaffinity. compare.sh scales N down for the
//! expensive shapes (thread spawn, thread-ring, rss); ns/op stays comparable.

use crate::common::*;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

pub fn run(w: &Work) -> Res {
    pin_to_cpus(w.procs);
    let (n, procs) = (w.n, w.procs);
    match w.name {
        "switch" => not_applicable("OS threads: no user-level switch"),
        "yield" => yield_pingpong(n),
        "spawn" => spawn_chain(n),
        "spawn_wait" => spawn_wait(n),
        "chansync" => chansync(n),
        "prodcons100" => prodcons(n, 100, procs),
        "threadring" => threadring(n),
        "select2" => select2(n),
        "rss" => rss(n),
        other => match sync_shape(other) {
            Some(shape) => mutex_bench(n, procs, shape),
            None if other == "burst" => {
                not_applicable("burst-and-return is measured for goro and Go")
            }
            None => Err(format!("unknown workload {other}")),
        },
    }
}

/// The mutex workloads on OS threads with std::sync::Mutex (std has no
/// WaitGroup). parallelism * PROCS threads on PROCS CPUs.
fn mutex_bench(n: u64, procs: usize, shape: SyncShape) -> Res {
    if matches!(shape.op, SyncOp::WgOwn | SyncOp::WgAddDone) {
        return not_applicable("std has no WaitGroup");
    }
    let workers = shape.parallelism * procs;
    let budget = Arc::new(AtomicI64::new(n as i64));
    let shared = Arc::new(std::sync::Mutex::new(()));
    let t = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, shared) = (budget.clone(), shared.clone());
            thread::spawn(move || {
                let mut pb = Pb::new(&budget);
                let own = std::sync::Mutex::new(());
                let own = std::hint::black_box(&own);
                while pb.next() {
                    match shape.op {
                        SyncOp::MutexOwn => own.lock_unlock(),
                        SyncOp::MutexShared { work } => {
                            shared.lock_unlock();
                            if work {
                                local_work();
                            }
                        }
                        _ => unreachable!(),
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "thread panicked")?;
    }
    sync_out(t.elapsed(), n, workers)
}

fn yield_pingpong(n: u64) -> Res {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                for _ in 0..n {
                    thread::yield_now();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "thread panicked")?;
    }
    Ok(Out::per_op(t.elapsed(), 2 * n))
}

fn chain(n: u64, done: Sender<()>) {
    if n == 0 {
        let _ = done.send(());
        return;
    }
    drop(thread::spawn(move || chain(n - 1, done)));
}

fn spawn_chain(n: u64) -> Res {
    let (tx, rx) = bounded::<()>(0);
    let t = Instant::now();
    drop(thread::spawn(move || chain(n, tx)));
    rx.recv().map_err(|_| "closed")?;
    Ok(Out::per_op(t.elapsed(), n))
}

fn spawn_wait(n: u64) -> Res {
    let (tx, rx) = unbounded::<()>();
    let t = Instant::now();
    for _ in 0..n {
        let tx = tx.clone();
        drop(thread::spawn(move || {
            let _ = tx.send(());
        }));
    }
    for _ in 0..n {
        rx.recv().map_err(|_| "closed")?;
    }
    Ok(Out::per_op(t.elapsed(), n))
}

fn chansync(n: u64) -> Res {
    let procs: i64 = 2;
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED / procs * procs));
    let (ctx, crx) = bounded::<bool>(procs as usize);
    let (tx, rx) = bounded::<i32>(0);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx, tx, rx) = (batches.clone(), ctx.clone(), tx.clone(), rx.clone());
        thread::spawn(move || {
            loop {
                let i = batches.fetch_sub(1, SeqCst) - 1;
                if i < 0 {
                    break;
                }
                for _ in 0..CALLS_PER_SCHED {
                    if i % 2 == 0 {
                        rx.recv().unwrap();
                        tx.send(0).unwrap();
                    } else {
                        tx.send(0).unwrap();
                        rx.recv().unwrap();
                    }
                }
            }
            ctx.send(true).unwrap();
        });
    }
    for _ in 0..procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

fn prodcons(n: u64, cap: usize, procs: usize) -> Res {
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED));
    let (ctx, crx) = bounded::<bool>(2 * procs);
    let (tx, rx) = bounded::<i32>(cap);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx1, tx) = (batches.clone(), ctx.clone(), tx.clone());
        thread::spawn(move || {
            while batches.fetch_sub(1, SeqCst) > 0 {
                for _ in 0..CALLS_PER_SCHED {
                    tx.send(1).unwrap();
                }
            }
            tx.send(0).unwrap();
            ctx1.send(false).unwrap();
        });
        let (ctx2, rx) = (ctx.clone(), rx.clone());
        thread::spawn(move || {
            while rx.recv().unwrap() != 0 {}
            ctx2.send(false).unwrap();
        });
    }
    for _ in 0..2 * procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

fn threadring(n: u64) -> Res {
    let (done_tx, done_rx) = bounded::<usize>(0);
    let chans: Vec<(Sender<u64>, Receiver<u64>)> = (0..RING).map(|_| bounded(0)).collect();
    for i in 0..RING {
        let rx = chans[i].1.clone();
        let next = chans[(i + 1) % RING].0.clone();
        let done = done_tx.clone();
        thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || loop {
                let Ok(tok) = rx.recv() else { return };
                if tok == 0 {
                    let _ = done.send(i + 1);
                    return;
                }
                if next.send(tok - 1).is_err() {
                    return;
                }
            })
            .map_err(|e| format!("thread spawn: {e}"))?;
    }
    let first = chans[0].0.clone();
    drop(chans);
    let t = Instant::now();
    first.send(n).map_err(|_| "ring closed")?;
    let id = done_rx.recv().map_err(|_| "done closed")?;
    ring_out(t.elapsed(), n, id)
}

fn select2(n: u64) -> Res {
    let half = n / 2;
    let (atx, arx) = bounded::<u64>(0);
    let (btx, brx) = bounded::<u64>(0);
    let t = Instant::now();
    for tx in [atx.clone(), btx.clone()] {
        thread::spawn(move || {
            for i in 0..half {
                tx.send(i).unwrap();
            }
        });
    }
    let (mut got, mut na) = (0u64, 0u64);
    while got < 2 * half {
        crossbeam_channel::select! {
            recv(arx) -> v => { v.unwrap(); got += 1; na += 1; },
            recv(brx) -> v => { v.unwrap(); got += 1; },
        }
    }
    let d = t.elapsed();
    drop((atx, btx));
    Ok(Out::per_op(d, got).with("from_a", na))
}

fn rss(n: u64) -> Res {
    let (tx, rx) = bounded::<()>(0);
    let started = Arc::new(AtomicU64::new(0));
    let before = vm_rss();
    for i in 0..n {
        let (rx, started) = (rx.clone(), started.clone());
        // Smallest practical stack; RSS counts only touched pages anyway.
        let r = thread::Builder::new().stack_size(64 << 10).spawn(move || {
            started.fetch_add(1, SeqCst);
            let _ = rx.recv();
        });
        if let Err(e) = r {
            return Err(format!("thread-spawn-failed-at-{i}: {e}"));
        }
    }
    while started.load(SeqCst) < n {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(50));
    let after = vm_rss();
    drop(tx);
    rss_out(before, after, n)
}
