//! tokio rows. PROCS=1 uses the current_thread runtime, otherwise a
//! multi_thread runtime with PROCS workers. The measured body runs inside a
//! spawned task (not on the block_on thread), like Go's benchmark goroutine.
//!
//! tokio has no MPMC and no rendezvous channel: the Go shapes that need one
//! channel shared by several receivers (chansync, prodcons100) use
//! `flume` (MPMC) through its async API (prodcons100); the others use
//! tokio::sync::mpsc (minimum capacity 1).

use crate::common::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

type BoxFut = Pin<Box<dyn Future<Output = Res> + Send>>;

pub fn run(w: &Work) -> Res {
    let (n, procs) = (w.n, w.procs);
    let rt = if procs <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(procs)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("runtime build failed: {e}"))?;
    let fut: BoxFut = match w.name {
        "switch" => return not_applicable("tokio tasks are stackless; no raw context switch"),
        "yield" => Box::pin(yield_pingpong(n)),
        "spawn" => Box::pin(spawn_chain(n)),
        "spawn_wait" => Box::pin(spawn_wait(n)),
        "chansync" => Box::pin(chansync(n)),
        "prodcons100" => Box::pin(prodcons(n, 100, procs)),
        "threadring" => Box::pin(threadring(n)),
        "select2" => Box::pin(select2(n)),
        "rss" => Box::pin(rss(n)),
        "idle" => Box::pin(idle(n)),
        other => match sync_shape(other) {
            Some(shape) => Box::pin(mutex_bench(n, procs, shape)),
            None if other == "burst" => {
                return not_applicable("burst-and-return is measured for goro and Go")
            }
            None => return Err(format!("unknown workload {other}")),
        },
    };
    let r = rt.block_on(async move { tokio::spawn(fut).await });
    let out = r.map_err(|e| format!("task failed: {e}"))?;
    std::mem::forget(rt); // parked tasks may remain; process exits right after
    out
}

async fn yield_pingpong(n: u64) -> Res {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(async move {
                for _ in 0..n {
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for h in hs {
        h.await.map_err(|e| e.to_string())?;
    }
    Ok(Out::per_op(t.elapsed(), 2 * n))
}

fn chain(n: u64, done: oneshot::Sender<()>) {
    tokio::spawn(async move {
        if n == 0 {
            let _ = done.send(());
        } else {
            chain(n - 1, done);
        }
    });
}

async fn spawn_chain(n: u64) -> Res {
    let (tx, rx) = oneshot::channel();
    let t = Instant::now();
    chain(n, tx);
    rx.await.map_err(|_| "done dropped")?;
    // chain(n) spawns n+1 tasks, Go's f(n) n+1 goroutines: same count.
    Ok(Out::per_op(t.elapsed(), n))
}

async fn spawn_wait(n: u64) -> Res {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let t = Instant::now();
    for _ in 0..n {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(());
        });
    }
    for _ in 0..n {
        rx.recv().await.ok_or("closed")?;
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// ChanSync shape with one tokio mpsc queue (capacity 1, tokio's minimum) per
/// direction. Go's single rendezvous channel is not reproducible: tokio has no
/// MPMC/rendezvous channel, and flume's async bounded(0) lets a sender return
/// before a waiting async receiver took the value (flume issue #140), so a
/// task can receive its own message and the shape deadlocks. With buffered
/// queues a role swap has the same problem, so the roles are fixed (task 0
/// receives first, task 1 sends first), each running half of the batches:
/// the same number of messages, each received by the other task before it
/// sends again, as in Go.
async fn chansync(n: u64) -> Res {
    let procs: i64 = 2;
    let batches = n as i64 / CALLS_PER_SCHED / procs * procs;
    let (ctx, mut crx) = mpsc::channel::<bool>(procs as usize);
    let (ab_tx, mut ab_rx) = mpsc::channel::<i32>(1);
    let (ba_tx, mut ba_rx) = mpsc::channel::<i32>(1);
    let t = Instant::now();
    let ctx2 = ctx.clone();
    tokio::spawn(async move {
        for _ in 0..batches / 2 * CALLS_PER_SCHED {
            ab_rx.recv().await.unwrap();
            ba_tx.send(0).await.unwrap();
        }
        ctx.send(true).await.unwrap();
    });
    tokio::spawn(async move {
        for _ in 0..batches / 2 * CALLS_PER_SCHED {
            ab_tx.send(0).await.unwrap();
            ba_rx.recv().await.unwrap();
        }
        ctx2.send(true).await.unwrap();
    });
    for _ in 0..procs {
        crx.recv().await.unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

async fn prodcons(n: u64, cap: usize, procs: usize) -> Res {
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED));
    let (ctx, mut crx) = mpsc::channel::<bool>(2 * procs);
    let (tx, rx) = flume::bounded::<i32>(cap);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx1, tx) = (batches.clone(), ctx.clone(), tx.clone());
        tokio::spawn(async move {
            while batches.fetch_sub(1, SeqCst) > 0 {
                for _ in 0..CALLS_PER_SCHED {
                    tx.send_async(1).await.unwrap();
                }
            }
            tx.send_async(0).await.unwrap();
            ctx1.send(false).await.unwrap();
        });
        let (ctx2, rx) = (ctx.clone(), rx.clone());
        tokio::spawn(async move {
            while rx.recv_async().await.unwrap() != 0 {}
            ctx2.send(false).await.unwrap();
        });
    }
    for _ in 0..2 * procs {
        crx.recv().await.unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

async fn threadring(n: u64) -> Res {
    let (done_tx, mut done_rx) = mpsc::channel::<usize>(1);
    let mut txs = Vec::with_capacity(RING);
    let mut rxs = Vec::with_capacity(RING);
    for _ in 0..RING {
        let (tx, rx) = mpsc::channel::<u64>(1);
        txs.push(tx);
        rxs.push(Some(rx));
    }
    for i in 0..RING {
        let mut rx = rxs[i].take().unwrap();
        let next = txs[(i + 1) % RING].clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            loop {
                let Some(tok) = rx.recv().await else { return };
                if tok == 0 {
                    let _ = done.send(i + 1).await;
                    return;
                }
                if next.send(tok - 1).await.is_err() {
                    return;
                }
            }
        });
    }
    let first = txs[0].clone();
    drop(txs);
    let t = Instant::now();
    first.send(n).await.map_err(|_| "ring closed")?;
    let id = done_rx.recv().await.ok_or("done closed")?;
    ring_out(t.elapsed(), n, id)
}

async fn select2(n: u64) -> Res {
    let half = n / 2;
    let (atx, mut arx) = mpsc::channel::<u64>(1);
    let (btx, mut brx) = mpsc::channel::<u64>(1);
    let t = Instant::now();
    for tx in [atx.clone(), btx.clone()] {
        tokio::spawn(async move {
            for i in 0..half {
                tx.send(i).await.unwrap();
            }
        });
    }
    let (mut got, mut na) = (0u64, 0u64);
    while got < 2 * half {
        // tokio::select! picks a random ready branch, like Go.
        tokio::select! {
            Some(_) = arx.recv() => { got += 1; na += 1; }
            Some(_) = brx.recv() => { got += 1; }
        }
    }
    let d = t.elapsed();
    drop((atx, btx));
    Ok(Out::per_op(d, got).with("from_a", na))
}

/// Spawns `n` tasks that each park on `changed()` of the returned watch
/// channel (drop it to end them); returns once all have started.
async fn park_tasks(n: u64) -> watch::Sender<()> {
    let (tx, rx) = watch::channel(());
    let started = Arc::new(AtomicU64::new(0));
    for _ in 0..n {
        let (mut rx, started) = (rx.clone(), started.clone());
        tokio::spawn(async move {
            started.fetch_add(1, SeqCst);
            let _ = rx.changed().await;
        });
    }
    while started.load(SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tx
}

/// idle: n tasks parked, the main task asleep in tokio::time::sleep;
/// context switches of all threads per second.
async fn idle(n: u64) -> Res {
    let tx = park_tasks(n).await;
    tokio::time::sleep(IDLE_SETTLE).await;
    let before = ctx_switches();
    tokio::time::sleep(IDLE_WINDOW).await;
    let after = ctx_switches();
    drop(tx);
    idle_out(before, after, n)
}

async fn rss(n: u64) -> Res {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let before = vm_rss();
    let tx = park_tasks(n).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = vm_rss();
    drop(tx);
    rss_out(before, after, n)
}

/// The mutex workloads with tokio::sync::Mutex (tokio has no WaitGroup):
/// parallelism * PROCS tasks share N iterations.
async fn mutex_bench(n: u64, procs: usize, shape: SyncShape) -> Res {
    if matches!(shape.op, SyncOp::WgOwn | SyncOp::WgAddDone) {
        return not_applicable("tokio has no WaitGroup");
    }
    let workers = shape.parallelism * procs;
    let budget = Arc::new(AtomicI64::new(n as i64));
    let shared = Arc::new(tokio::sync::Mutex::new(()));
    let t = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, shared) = (budget.clone(), shared.clone());
            tokio::spawn(async move {
                let mut pb = Pb::new(&budget);
                let own = tokio::sync::Mutex::new(());
                while pb.next() {
                    match shape.op {
                        SyncOp::MutexOwn => drop(std::hint::black_box(&own).lock().await),
                        SyncOp::MutexShared { work } => {
                            drop(shared.lock().await);
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
        h.await.map_err(|e| e.to_string())?;
    }
    sync_out(t.elapsed(), n, workers)
}
