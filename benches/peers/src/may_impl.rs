//! may rows (stackful coroutines, work-stealing scheduler).
//!
//! may's channels are unbounded MPSC/MPMC queues only (no rendezvous, no
//! bounded capacity), and its `select!` spawns one helper coroutine per arm.
//! The emulations used below are documented in benches/peers/README.md.

use crate::common::*;
use may::sync::{mpmc, mpsc, Semphore};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(w: &Work) -> Res {
    let (n, procs) = (w.n, w.procs);
    may::config().set_workers(procs);
    let name = w.name.to_string();
    let body = move || -> Res {
        match name.as_str() {
            "switch" => not_applicable("may exposes no raw context switch"),
            "yield" => yield_pingpong(n),
            "spawn" => spawn_chain(n),
            "spawn_wait" => spawn_wait(n),
            "chansync" => chansync(n),
            "prodcons100" => prodcons(n, 100, procs),
            "threadring" => threadring(n),
            "select2" => select2(n),
            "rss" => rss(n),
            "idle" => idle(n),
            other => match sync_shape(other) {
                Some(shape) => mutex_bench(n, procs, shape),
                None if other == "burst" => {
                    not_applicable("burst-and-return is measured for goro and Go")
                }
                None => Err(format!("unknown workload {other}")),
            },
        }
    };
    // Run the measured body as a coroutine, like Go's benchmark goroutine.
    match may::go!(body).join() {
        Ok(r) => r,
        Err(p) => Err(panic_reason(p)),
    }
}

/// Turn a panic payload into a one-line n/a reason; a failed stack mmap is
/// may's coroutine-count limit (2 VMAs per coroutine vs vm.max_map_count).
pub fn panic_reason(p: Box<dyn std::any::Any + Send>) -> String {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    let mut r = format!("panicked: {}", msg.replace('\n', " "));
    if msg.contains("alloc sys stack") {
        let max_map = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap_or_default();
        r.push_str(&format!(
            " (each may stack is an mmap + guard page: 2 VMAs per coroutine, vm.max_map_count={})",
            max_map.trim()
        ));
    }
    r
}

fn yield_pingpong(n: u64) -> Res {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            may::go!(move || {
                for _ in 0..n {
                    may::coroutine::yield_now();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "coroutine panicked".to_string())?;
    }
    Ok(Out::per_op(t.elapsed(), 2 * n))
}

fn chain(n: u64, done: mpsc::Sender<()>) {
    if n == 0 {
        let _ = done.send(());
        return;
    }
    drop(may::go!(move || chain(n - 1, done)));
}

fn spawn_chain(n: u64) -> Res {
    let (tx, rx) = mpsc::channel::<()>();
    let t = Instant::now();
    drop(may::go!(move || chain(n, tx)));
    rx.recv().map_err(|_| "done closed")?;
    Ok(Out::per_op(t.elapsed(), n))
}

fn spawn_wait(n: u64) -> Res {
    let (tx, rx) = mpsc::channel::<()>();
    let t = Instant::now();
    for _ in 0..n {
        let tx = tx.clone();
        drop(may::go!(move || {
            let _ = tx.send(());
        }));
    }
    for _ in 0..n {
        rx.recv().map_err(|_| "closed")?;
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// ChanSync shape, but may has no rendezvous channel, so one queue per
/// direction. Go's two goroutines swap roles by batch parity; with buffered
/// queues a role swap lets a goroutine receive its own last message, so here
/// the roles are fixed (goroutine 0 receives first, goroutine 1 sends first)
/// and each runs half of the batches: the same number of messages, each
/// received by the other goroutine before it sends again, as in Go.
fn chansync(n: u64) -> Res {
    let procs: i64 = 2;
    let batches = n as i64 / CALLS_PER_SCHED / procs * procs;
    let (ctx, crx) = mpsc::channel::<bool>();
    let (ab_tx, ab_rx) = mpsc::channel::<i32>();
    let (ba_tx, ba_rx) = mpsc::channel::<i32>();
    let t = Instant::now();
    let ctx2 = ctx.clone();
    drop(may::go!(move || {
        for _ in 0..batches / 2 * CALLS_PER_SCHED {
            ab_rx.recv().unwrap();
            ba_tx.send(0).unwrap();
        }
        ctx.send(true).unwrap();
    }));
    drop(may::go!(move || {
        for _ in 0..batches / 2 * CALLS_PER_SCHED {
            ab_tx.send(0).unwrap();
            ba_rx.recv().unwrap();
        }
        ctx2.send(true).unwrap();
    }));
    for _ in 0..procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// Bounded MPMC channel emulated on may: an unbounded mpmc queue plus a
/// counting semaphore holding the free slots.
#[derive(Clone)]
struct Bounded<T> {
    tx: mpmc::Sender<T>,
    rx: mpmc::Receiver<T>,
    slots: Arc<Semphore>,
}

impl<T> Bounded<T> {
    fn new(cap: usize) -> Self {
        let (tx, rx) = mpmc::channel();
        Bounded {
            tx,
            rx,
            slots: Arc::new(Semphore::new(cap)),
        }
    }
    fn send(&self, v: T) {
        self.slots.wait();
        self.tx.send(v).ok().unwrap();
    }
    fn recv(&self) -> T {
        let v = self.rx.recv().unwrap();
        self.slots.post();
        v
    }
}

fn prodcons(n: u64, cap: usize, procs: usize) -> Res {
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED));
    let (ctx, crx) = mpsc::channel::<bool>();
    let ch = Bounded::<i32>::new(cap);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx1, ch1) = (batches.clone(), ctx.clone(), ch.clone());
        drop(may::go!(move || {
            while batches.fetch_sub(1, SeqCst) > 0 {
                for _ in 0..CALLS_PER_SCHED {
                    ch1.send(1);
                }
            }
            ch1.send(0);
            ctx1.send(false).unwrap();
        }));
        let (ctx2, ch2) = (ctx.clone(), ch.clone());
        drop(may::go!(move || {
            while ch2.recv() != 0 {}
            ctx2.send(false).unwrap();
        }));
    }
    for _ in 0..2 * procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

fn threadring(n: u64) -> Res {
    let (done_tx, done_rx) = mpsc::channel::<usize>();
    let mut txs = Vec::with_capacity(RING);
    let mut rxs = Vec::with_capacity(RING);
    for _ in 0..RING {
        let (tx, rx) = mpsc::channel::<u64>();
        txs.push(tx);
        rxs.push(Some(rx));
    }
    for i in 0..RING {
        let rx = rxs[i].take().unwrap();
        let next = txs[(i + 1) % RING].clone();
        let done = done_tx.clone();
        drop(may::go!(move || loop {
            let Ok(tok) = rx.recv() else { return };
            if tok == 0 {
                let _ = done.send(i + 1);
                return;
            }
            if next.send(tok - 1).is_err() {
                return;
            }
        }));
    }
    let first = txs[0].clone();
    drop(txs);
    let t = Instant::now();
    first.send(n).map_err(|_| "ring closed")?;
    let id = done_rx.recv().map_err(|_| "done closed")?;
    ring_out(t.elapsed(), n, id)
}

/// may::select! (one helper coroutine per arm, losers cancelled). A helper
/// that already received before being cancelled still runs its arm body, so
/// values are counted in the arm bodies.
fn select2(n: u64) -> Res {
    let half = n / 2;
    let (atx, arx) = mpmc::channel::<u64>();
    let (btx, brx) = mpmc::channel::<u64>();
    let t = Instant::now();
    for tx in [atx.clone(), btx.clone()] {
        drop(may::go!(move || {
            for i in 0..half {
                tx.send(i).unwrap();
            }
        }));
    }
    let got = AtomicU64::new(0);
    let na = AtomicU64::new(0);
    // A third, timer arm only detects a stall (values lost by a cancelled
    // arm) so the run reports n/a instead of hanging forever.
    let (mut last, mut idle) = (0u64, 0u32);
    while got.load(Relaxed) < 2 * half {
        let idx = may::select!(
            v = arx.recv() => { v.unwrap(); got.fetch_add(1, Relaxed); na.fetch_add(1, Relaxed); },
            v = brx.recv() => { v.unwrap(); got.fetch_add(1, Relaxed); },
            _ = may::coroutine::sleep(Duration::from_millis(200)) => {}
        );
        if idx == 2 {
            let g = got.load(Relaxed);
            idle = if g == last { idle + 1 } else { 0 };
            last = g;
            if idle >= 10 {
                return Err(format!(
                    "stalled: received {g} of {} values, no progress for 2s (may::select! helper lost a value?)",
                    2 * half
                ));
            }
        }
    }
    let d = t.elapsed();
    drop((atx, btx));
    Ok(Out::per_op(d, got.load(Relaxed)).with("from_a", na.load(Relaxed)))
}

/// Coroutines parked by [`park_coroutines`]: dropping `tx` ends them.
struct Parked {
    tx: mpmc::Sender<()>,
    handles: Vec<may::coroutine::JoinHandle<()>>,
}

/// Spawns `n` coroutines that each park on a receive from one channel;
/// returns once all have started, or the reason a spawn failed (may
/// maps each stack with a guard page, so vm.max_map_count runs out).
fn park_coroutines(n: u64) -> Result<Parked, String> {
    let (tx, rx) = mpmc::channel::<()>();
    let started = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        let (rx, started) = (rx.clone(), started.clone());
        let b = may::coroutine::Builder::new();
        // SAFETY: the closure uses no thread-local storage.
        let r = unsafe {
            b.spawn(move || {
                started.fetch_add(1, SeqCst);
                let _ = rx.recv();
            })
        };
        match r {
            Ok(h) => handles.push(h),
            Err(e) => {
                let max_map =
                    std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap_or_default();
                return Err(format!(
                    "spawn-failed-at-coroutine-{i}: {e} (vm.max_map_count={}; each may stack is an mmap with a guard page)",
                    max_map.trim()
                ));
            }
        }
    }
    while started.load(SeqCst) < n {
        may::coroutine::sleep(Duration::from_millis(1));
    }
    Ok(Parked { tx, handles })
}

/// idle: n coroutines parked, the main coroutine asleep in
/// may::coroutine::sleep; context switches of all threads per second.
fn idle(n: u64) -> Res {
    let parked = park_coroutines(n)?;
    may::coroutine::sleep(IDLE_SETTLE);
    let before = ctx_switches();
    may::coroutine::sleep(IDLE_WINDOW);
    let after = ctx_switches();
    drop(parked.tx);
    for h in parked.handles {
        let _ = h.join();
    }
    idle_out(before, after, n)
}

fn rss(n: u64) -> Res {
    may::coroutine::sleep(Duration::from_millis(20));
    let before = vm_rss();
    let parked = park_coroutines(n)?;
    may::coroutine::sleep(Duration::from_millis(50));
    let after = vm_rss();
    drop(parked);
    rss_out(before, after, n)
}

/// The mutex workloads with may::sync::Mutex (may has no WaitGroup):
/// parallelism * PROCS coroutines share N iterations.
fn mutex_bench(n: u64, procs: usize, shape: SyncShape) -> Res {
    if matches!(shape.op, SyncOp::WgOwn | SyncOp::WgAddDone) {
        return not_applicable("may has no WaitGroup");
    }
    let workers = shape.parallelism * procs;
    let budget = Arc::new(AtomicI64::new(n as i64));
    let shared = Arc::new(may::sync::Mutex::new(()));
    let t = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, shared) = (budget.clone(), shared.clone());
            may::go!(move || {
                let mut pb = Pb::new(&budget);
                let own = may::sync::Mutex::new(());
                let own = std::hint::black_box(&own);
                while pb.next() {
                    match shape.op {
                        SyncOp::MutexOwn => drop(own.lock().unwrap()),
                        SyncOp::MutexShared { work } => {
                            drop(shared.lock().unwrap());
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
        h.join().map_err(|_| "coroutine panicked".to_string())?;
    }
    sync_out(t.elapsed(), n, workers)
}
