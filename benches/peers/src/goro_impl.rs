//! goro rows. Shapes mirror benches/go/main.go line for line.

use crate::common::*;
use goro::{Receiver, Sender};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(procs: usize) -> goro::Config {
    goro::Config::from_env().max_procs(procs)
}

pub fn run(w: &Work) -> Res {
    let (n, procs) = (w.n, w.procs);
    match w.name {
        "switch" => switch(n),
        "yield" => goro::run_with(config(procs), move || yield_pingpong(n)),
        "spawn" => goro::run_with(config(procs), move || spawn_chain(n)),
        "spawn_wait" => goro::run_with(config(procs), move || spawn_wait(n)),
        "chansync" => goro::run_with(config(procs), move || chansync(n)),
        "prodcons100" => goro::run_with(config(procs), move || prodcons(n, 100, procs)),
        "threadring" => goro::run_with(config(procs), move || threadring(n)),
        "select2" => goro::run_with(config(procs), move || select2(n)),
        "rss" => goro::run_with(config(procs), move || rss(n)),
        "syscall" => goro::run_with(config(procs), move || syscall_getpid(n)),
        "preempt" => goro::run_with(config(procs), move || preempt_lateness(n)),
        "blocking" => goro::run_with(config(procs), move || blocking_sleeps(n, false)),
        "blocking_guarded" => goro::run_with(config(procs), move || blocking_sleeps(n, true)),
        "preempt_overhead" => preempt_overhead(n, procs),
        "burst" => goro::run_with(config(procs), move || burst(n)),
        "idle" => goro::run_with(config(procs), move || idle(n)),
        "trace" => goro::run_with(config(procs), move || trace_overhead(n)),
        other => match sync_shape(other) {
            Some(shape) => goro::run_with(config(procs), move || {
                sync_bench::<GoroLock>(n, procs, shape, true)
            }),
            None => Err(format!("unknown workload {other}")),
        },
    }
}

/// The `goro_std` / `goro_pl` rows: the mutex workloads run by goroutines,
/// with std::sync::Mutex / parking_lot::Mutex instead of goro::sync::Mutex.
pub fn run_foreign_lock(w: &Work, imp: &str) -> Res {
    let (n, procs) = (w.n, w.procs);
    let Some(shape) = sync_shape(w.name) else {
        return not_applicable("only the mutex workloads run with a foreign lock");
    };
    if matches!(shape.op, SyncOp::WgOwn | SyncOp::WgAddDone) {
        return not_applicable("std and parking_lot have no WaitGroup");
    }
    match imp {
        "goro_std" => goro::run_with(config(procs), move || {
            sync_bench::<std::sync::Mutex<()>>(n, procs, shape, false)
        }),
        "goro_pl" => goro::run_with(config(procs), move || {
            sync_bench::<parking_lot::Mutex<()>>(n, procs, shape, false)
        }),
        other => Err(format!("unknown impl {other}")),
    }
}

type GoroLock = goro::sync::Mutex<()>;

impl Lock for GoroLock {
    fn new() -> Self {
        goro::sync::Mutex::new(())
    }
    #[inline]
    fn lock_unlock(&self) {
        drop(self.lock());
    }
}

/// Go's sync benchmarks under b.RunParallel: parallelism * PROCS goroutines
/// share N iterations (common.rs Pb). `wg`: whether goro::sync::WaitGroup
/// workloads are allowed (the goro row).
fn sync_bench<L: Lock>(n: u64, procs: usize, shape: SyncShape, wg: bool) -> Res {
    if !wg && matches!(shape.op, SyncOp::WgOwn | SyncOp::WgAddDone) {
        return not_applicable("no WaitGroup");
    }
    let workers = shape.parallelism * procs;
    let budget = Arc::new(AtomicI64::new(n as i64));
    let shared = Arc::new(L::new());
    let shared_wg = goro::sync::WaitGroup::new();
    let t = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, shared, shared_wg) = (budget.clone(), shared.clone(), shared_wg.clone());
            goro::spawn(move || {
                let mut pb = Pb::new(&budget);
                match shape.op {
                    SyncOp::MutexOwn => {
                        // Go pads its per-goroutine mutex; this one lives on
                        // the goroutine's own stack.
                        let mu = L::new();
                        let mu = std::hint::black_box(&mu);
                        while pb.next() {
                            mu.lock_unlock();
                        }
                    }
                    SyncOp::MutexShared { work } => {
                        while pb.next() {
                            shared.lock_unlock();
                            if work {
                                local_work();
                            }
                        }
                    }
                    SyncOp::WgOwn => {
                        // Go's PaddedWaitGroup: keep the next allocation
                        // (another worker's group) off this cache line.
                        let wg = goro::sync::WaitGroup::new();
                        let pad = std::hint::black_box(Box::new([0u8; 128]));
                        while pb.next() {
                            wg.add(1);
                            wg.done();
                            wg.wait();
                        }
                        drop(pad);
                    }
                    SyncOp::WgAddDone => {
                        while pb.next() {
                            shared_wg.add(1);
                            shared_wg.done();
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "goroutine panicked".to_string())?;
    }
    sync_out(t.elapsed(), n, workers)
}

#[cfg(feature = "goro_switch")]
fn switch(n: u64) -> Res {
    // Raw stack-switch round trip, no scheduler involved.
    let _ = goro::__bench::raw_switch_pair(n / 10); // warm up
    let d: Duration = goro::__bench::raw_switch_pair(n);
    Ok(Out::per_op(d, n))
}

#[cfg(not(feature = "goro_switch"))]
fn switch(_n: u64) -> Res {
    Err("goro::__bench::raw_switch_pair-missing(built-without-goro_switch)".into())
}

/// Two goroutines on one P, each calling yield_now n times. ns per yield.
fn yield_pingpong(n: u64) -> Res {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            goro::spawn(move || {
                for _ in 0..n {
                    goro::yield_now();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "goroutine panicked".to_string())?;
    }
    Ok(Out::per_op(t.elapsed(), 2 * n))
}

/// BenchmarkCreateGoroutines (procs=1): each goroutine spawns the next.
fn chain(n: u64, done: Sender<()>) {
    if n == 0 {
        let _ = done.send(());
        return;
    }
    drop(goro::spawn(move || chain(n - 1, done)));
}

fn spawn_chain(n: u64) -> Res {
    let (tx, rx) = goro::chan::<()>(0);
    let t = Instant::now();
    drop(goro::spawn(move || chain(n, tx)));
    rx.recv().map_err(|_| "chain: done channel closed")?;
    Ok(Out::per_op(t.elapsed(), n))
}

/// Spawn n goroutines from one goroutine, each signals a counting channel
/// (buffered, cap n); then receive n times.
fn spawn_wait(n: u64) -> Res {
    let (tx, rx) = goro::chan::<()>(n as usize);
    let t = Instant::now();
    for _ in 0..n {
        let tx = tx.clone();
        drop(goro::spawn(move || {
            let _ = tx.send(());
        }));
    }
    for _ in 0..n {
        rx.recv().map_err(|_| "spawn_wait: channel closed")?;
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// BenchmarkChanSync: two goroutines ping-pong over ONE unbuffered channel.
fn chansync(n: u64) -> Res {
    let procs: i64 = 2;
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED / procs * procs));
    let (ctx, crx) = goro::chan::<bool>(procs as usize);
    let (tx, rx) = goro::chan::<i32>(0);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx, tx, rx) = (batches.clone(), ctx.clone(), tx.clone(), rx.clone());
        drop(goro::spawn(move || {
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
        }));
    }
    for _ in 0..procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// benchmarkChanProdCons(chanSize, localWork=0): procs producers and procs
/// consumers on one channel of capacity `cap`.
fn prodcons(n: u64, cap: usize, procs: usize) -> Res {
    let batches = Arc::new(AtomicI64::new(n as i64 / CALLS_PER_SCHED));
    let (ctx, crx) = goro::chan::<bool>(2 * procs);
    let (tx, rx) = goro::chan::<i32>(cap);
    let t = Instant::now();
    for _ in 0..procs {
        let (batches, ctx1, tx) = (batches.clone(), ctx.clone(), tx.clone());
        drop(goro::spawn(move || {
            while batches.fetch_sub(1, SeqCst) > 0 {
                for _ in 0..CALLS_PER_SCHED {
                    tx.send(1).unwrap();
                }
            }
            tx.send(0).unwrap();
            ctx1.send(false).unwrap();
        }));
        let (ctx2, rx) = (ctx.clone(), rx.clone());
        drop(goro::spawn(move || {
            loop {
                if rx.recv().unwrap() == 0 {
                    break;
                }
            }
            ctx2.send(false).unwrap();
        }));
    }
    for _ in 0..2 * procs {
        crx.recv().unwrap();
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// benchmarks-game thread-ring: 503 goroutines, unbuffered channel each.
fn threadring(n: u64) -> Res {
    let (done_tx, done_rx) = goro::chan::<usize>(0);
    let chans: Vec<(Sender<u64>, Receiver<u64>)> = (0..RING).map(|_| goro::chan(0)).collect();
    for i in 0..RING {
        let rx = chans[i].1.clone();
        let next = chans[(i + 1) % RING].0.clone();
        let done = done_tx.clone();
        drop(goro::spawn(move || loop {
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
    let first = chans[0].0.clone();
    drop(chans); // ring closes itself (cascade) once the winner exits
    let t = Instant::now();
    first.send(n).map_err(|_| "ring closed")?;
    let id = done_rx.recv().map_err(|_| "done closed")?;
    ring_out(t.elapsed(), n, id)
}

/// The thread ring with goro::trace off, then on (recording only: the file
/// is written by `trace::stop` after the timed part, reported as stop_ms);
/// value: the on/off ratio of ns per hop.
fn trace_overhead(n: u64) -> Res {
    let off = threadring(n)?.value;
    let path = std::env::temp_dir().join(format!("goro-bench-trace-{}.json", std::process::id()));
    goro::trace::start(&path).map_err(|e| format!("trace start: {e}"))?;
    let on = threadring(n)?.value;
    let t = Instant::now();
    let stopped = goro::trace::stop();
    let stop_ms = t.elapsed().as_secs_f64() * 1e3;
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&path);
    stopped.map_err(|e| format!("trace stop: {e}"))?;
    Ok(Out {
        value: on / off,
        extra: Vec::new(),
    }
    .with("unit", "on/off")
    .with("off_ns", format!("{off:.1}"))
    .with("on_ns", format!("{on:.1}"))
    .with("stop_ms", format!("{stop_ms:.1}"))
    .with("file_mb", format!("{:.1}", size as f64 / 1e6)))
}

/// One goroutine selecting over two unbuffered channels, each fed by its own
/// sender goroutine (n/2 values each). ns per received value.
fn select2(n: u64) -> Res {
    let half = n / 2;
    let (atx, arx) = goro::chan::<u64>(0);
    let (btx, brx) = goro::chan::<u64>(0);
    let t = Instant::now();
    for tx in [atx.clone(), btx.clone()] {
        drop(goro::spawn(move || {
            for i in 0..half {
                tx.send(i).unwrap();
            }
        }));
    }
    let (mut got, mut na) = (0u64, 0u64);
    while got < 2 * half {
        goro::select! {
            recv(arx) -> v => { v.unwrap(); got += 1; na += 1; },
            recv(brx) -> v => { v.unwrap(); got += 1; },
        }
    }
    let d = t.elapsed();
    drop((atx, btx)); // keep both channels open (never closed in Go) until done
    Ok(Out::per_op(d, got).with("from_a", na))
}

/// n goroutines that each run `before_park`, count themselves started,
/// park on a receive from one channel, and count themselves exited once it
/// is closed: the shape of the rss and burst workloads.
struct ParkedGs {
    n: u64,
    tx: Sender<()>,
    started: Arc<AtomicU64>,
    exited: Arc<AtomicU64>,
}

impl ParkedGs {
    fn spawn(n: u64, before_park: fn()) -> ParkedGs {
        let (tx, rx) = goro::chan::<()>(0);
        let started = Arc::new(AtomicU64::new(0));
        let exited = Arc::new(AtomicU64::new(0));
        for _ in 0..n {
            let (rx, started, exited) = (rx.clone(), started.clone(), exited.clone());
            drop(goro::spawn(move || {
                before_park();
                started.fetch_add(1, SeqCst);
                let _ = rx.recv();
                exited.fetch_add(1, SeqCst);
            }));
        }
        ParkedGs {
            n,
            tx,
            started,
            exited,
        }
    }

    /// Sleeps 1 ms at a time until every goroutine has started.
    fn wait_started(&self) {
        while self.started.load(SeqCst) < self.n {
            goro::time::sleep(Duration::from_millis(1));
        }
    }

    /// Closes the channel and sleeps 1 ms at a time until every goroutine
    /// has exited or `limit` has passed; returns how many exited.
    fn release(self, limit: Option<Duration>) -> u64 {
        self.tx.close();
        let deadline = limit.map(|l| Instant::now() + l);
        while self.exited.load(SeqCst) < self.n && deadline.is_none_or(|d| Instant::now() < d) {
            goro::time::sleep(Duration::from_millis(1));
        }
        self.exited.load(SeqCst)
    }
}

/// idle: n goroutines parked, main goroutine asleep in goro::time::sleep;
/// context switches of all threads per second.
fn idle(n: u64) -> Res {
    let gs = ParkedGs::spawn(n, || {});
    gs.wait_started();
    goro::time::sleep(IDLE_SETTLE);
    let before = ctx_switches();
    goro::time::sleep(IDLE_WINDOW);
    let after = ctx_switches();
    gs.release(Some(Duration::from_secs(10)));
    idle_out(before, after, n)
}

/// n goroutines parked on a receive from one channel; VmRSS delta / n.
fn rss(n: u64) -> Res {
    goro::time::sleep(Duration::from_millis(20));
    let before = vm_rss();
    let gs = ParkedGs::spawn(n, || {});
    gs.wait_started();
    goro::time::sleep(Duration::from_millis(50));
    let after = vm_rss();
    let live = goro::num_goroutine();
    let woke = gs.release(Some(Duration::from_secs(10)));
    Ok(rss_out(before, after, n)?
        .with("num_goroutine", live)
        .with("woken_after_close", woke))
}

/// Stack frames of 1 KiB, `depth` deep: ~`depth` KiB of stack touched.
#[inline(never)]
fn deep(depth: u32) -> u64 {
    let buf = std::hint::black_box([depth as u8; 1024]);
    if depth == 0 {
        return buf[7] as u64;
    }
    deep(depth - 1) + buf[1000] as u64
}

/// Burst and return (issue 11): n goroutines each touch ~33 KiB of stack
/// and park; all are released and exit; then the process idles 15 s.
/// Value: percent of the burst's RSS growth still resident 15 s after the
/// goroutines ended (lower is better); peak and final RSS in the extras.
fn burst(n: u64) -> Res {
    goro::time::sleep(Duration::from_millis(20));
    let before = vm_rss();
    let gs = ParkedGs::spawn(n, || {
        std::hint::black_box(deep(32));
    });
    gs.wait_started();
    let peak = vm_rss();
    gs.release(None);
    let ended = Instant::now();
    let mut at5 = 0;
    for s in 1..=15 {
        goro::time::sleep(
            (ended + Duration::from_secs(s)).saturating_duration_since(Instant::now()),
        );
        if s == 5 {
            at5 = vm_rss();
        }
    }
    let after = vm_rss();
    let grown = peak.saturating_sub(before).max(1) as f64;
    Ok(Out {
        value: 100.0 * after.saturating_sub(before) as f64 / grown,
        extra: Vec::new(),
    }
    .with("unit", "percent_of_growth_kept_15s")
    .with("rss_before_mb", before >> 20)
    .with("rss_peak_mb", peak >> 20)
    .with("rss_5s_mb", at5 >> 20)
    .with("rss_15s_mb", after >> 20))
}

// ---- preemption and system calls (issue 7); shapes as in main.go ----

/// A short real system call between enter_syscall and exit_syscall, one P.
fn syscall_getpid(n: u64) -> Res {
    let t = Instant::now();
    for _ in 0..n {
        let g = goro::enter_syscall();
        // SAFETY: getpid has no preconditions.
        unsafe { libc::syscall(libc::SYS_getpid) };
        goro::exit_syscall(g);
    }
    Ok(Out::per_op(t.elapsed(), n))
}

fn hog_loop(stop: &std::sync::atomic::AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Relaxed) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    x
}

/// Worst lateness (ms) of a goroutine sleeping 10 ms n times beside a hog.
fn preempt_lateness(n: u64) -> Res {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hog = {
        let stop = stop.clone();
        goro::spawn(move || hog_loop(&stop))
    };
    let mut worst = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        goro::time::sleep(Duration::from_millis(10));
        worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(10)));
    }
    stop.store(true, SeqCst);
    hog.join().unwrap();
    let st = goro::stats();
    Ok(Out {
        value: worst.as_secs_f64() * 1e3,
        extra: Vec::new(),
    }
    .with("unit", "ms_worst_lateness")
    .with("preemptions_async", st.preemptions_async))
}

/// 8 goroutines × n × 50 ms nanosleep on one P: unguarded (blocking
/// detection) or inside goro::blocking. Wall time in ms.
fn blocking_sleeps(n: u64, guarded: bool) -> Res {
    let t = Instant::now();
    let hs: Vec<_> = (0..8)
        .map(|_| {
            goro::spawn(move || {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 50_000_000,
                };
                for _ in 0..n {
                    // SAFETY: a valid timespec; no remainder wanted.
                    let sleep = || unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                    if guarded {
                        goro::blocking(sleep);
                    } else {
                        sleep();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let st = goro::stats();
    Ok(Out {
        value: t.elapsed().as_secs_f64() * 1e3,
        extra: Vec::new(),
    }
    .with("unit", "ms")
    .with("retakes_detected", st.retakes_detected)
    .with("handed_off", st.syscalls_handed_off))
}

fn overhead_work(n: u64) -> f64 {
    let t = Instant::now();
    let hs: Vec<_> = (0..8u64)
        .map(|g| {
            goro::spawn(move || {
                let mut x = g + 1;
                for _ in 0..n / 8 {
                    // xorshift64, as in main.go: no closed form to shortcut.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x)
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    t.elapsed().as_secs_f64() * 1e3
}

/// 8 CPU-bound goroutines on `procs` Ps, fixed total work: wall time (ms)
/// with preemption on; preemption off is measured in a child process
/// (GODEBUG=asyncpreemptoff=1) and reported as off_ms / overhead_pct.
fn preempt_overhead(n: u64, procs: usize) -> Res {
    if std::env::var("GORO_PEERS_OVERHEAD_CHILD").is_ok() {
        let ms = goro::run_with(config(procs), move || overhead_work(n));
        return Ok(Out {
            value: ms,
            extra: Vec::new(),
        });
    }
    let on = goro::run_with(config(procs), move || {
        let ms = overhead_work(n);
        (ms, goro::stats().preemptions_async)
    });
    let off = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "preempt_overhead",
            "goro",
            &n.to_string(),
            &procs.to_string(),
        ])
        .env("GORO_PEERS_OVERHEAD_CHILD", "1")
        .env("GODEBUG", "asyncpreemptoff=1")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).to_string();
            s.split_whitespace()
                .nth(3)
                .and_then(|v| v.parse::<f64>().ok())
        });
    let mut out = Out {
        value: on.0,
        extra: Vec::new(),
    }
    .with("unit", "ms")
    .with("preemptions_async", on.1);
    if let Some(off) = off {
        out = out
            .with("off_ms", format!("{off:.1}"))
            .with("overhead_pct", format!("{:.2}", (on.0 / off - 1.0) * 100.0));
    }
    Ok(out)
}
