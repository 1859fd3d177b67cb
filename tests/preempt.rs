//! Asynchronous preemption, syscall hand-off and blocking detection: ports
//! of Go's proc_test.go preemption tests (TestPreemption, TestPreemptionGC,
//! TestPingPongHog, TestYieldProgress, TestNumGoroutine with hogs) and the
//! Rust-specific guarantees of pinned preemption (docs/PREEMPTION.md).
//!
//! Every test runs in a child process (this binary re-executed) with the
//! runtime configured through the environment (GOMAXPROCS, GODEBUG), so
//! each gets a fresh process-wide runtime with its own settings, and a hang
//! fails that test after a generous limit instead of blocking the run.
//! Without asynchronous preemption most of these tests hang: that is what
//! makes them able to fail.

mod common;

use common::qemu;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "GORO_PREEMPT_CHILD";

/// Runs `body` in a child process with `env` set, failing if it fails or
/// hangs. The limit is a hang detector, not a speed assertion.
fn child(name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body();
        return;
    }
    let out = spawn_child(name, env);
    assert!(
        out.status.success(),
        "{name} failed in the child: {:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until no G holds a `Pin::Preempted` reservation, then returns the
/// stats. A goroutine's `join` returns once its result is published, but
/// the goroutine still runs its exit path after that (dropping the packet
/// and its goroutine-locals): user code, where sysmon's SIGURG can preempt
/// it and, in pinned mode, pin it to its sleeping M until it runs again.
/// So right after a join `pinned_threads` may read 1 (CI saw it in
/// `pinned_limit`, and under qemu in `park_while_unwinding_keeps_panic_state`).
/// Yielding lets the pinned G finish. A leaked pin never returns to 0 and
/// fails the caller's assertion after the 10 s bound: a hang detector, not
/// a speed check.
fn settled_pins() -> goro::Stats {
    let t0 = Instant::now();
    while goro::stats().pinned_threads != 0 && t0.elapsed() < Duration::from_secs(10) {
        goro::yield_now();
    }
    goro::stats()
}

fn spawn_child(name: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = common::self_test_command(name);
    cmd.env(CHILD_ENV, name)
        .env_remove("GODEBUG")
        .env_remove("GOMAXPROCS")
        // The watchdog's SIGQUIT below then prints every goroutine.
        .env("GOTRACEBACK", "all")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("re-executing the test binary");
    let limit = Duration::from_secs(if qemu() { 240 } else { 60 });
    // A watchdog stops the child after the limit, first with SIGQUIT (its
    // goroutine dump then ends the output: where a CI run hung), after
    // 10 s more with SIGKILL; the output is read concurrently (a child
    // writing more than a pipe holds would block).
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let hung = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, hung) = (done.clone(), hung.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(SeqCst) {
                if start.elapsed() > limit && !hung.swap(true, SeqCst) {
                    // SAFETY: signalling our own child, not yet reaped
                    // (`done` is still false).
                    unsafe { libc::kill(pid, libc::SIGQUIT) };
                }
                if start.elapsed() > limit + Duration::from_secs(10) {
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return;
                }
                // Polling from a plain watchdog thread.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = child.wait_with_output().unwrap();
    done.store(true, SeqCst);
    watchdog.join().unwrap();
    assert!(
        !hung.load(SeqCst),
        "{name} hung for {limit:?} (a goroutine was never preempted or a P never handed off)\n--- stdout:\n{}--- stderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const ONE_P: (&str, &str) = ("GOMAXPROCS", "1");

/// A loop with no runtime call in it (the body the compiler cannot drop).
fn spin_until(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Relaxed) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    x
}

// ---------------------------------------------------------------------------
// Go's proc_test.go ports.

/// TestPreemption: with GOMAXPROCS = 1, two goroutines hand a token back
/// and forth by spinning on an atomic, never calling the runtime: each
/// hand-over needs the other one preempted.
#[test]
fn preemption_spin_handoff() {
    child("preemption_spin_handoff", &[ONE_P], || {
        goro::run(|| {
            let n = if qemu() { 5 } else { 20 };
            let x = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..2)
                .map(|g| {
                    let x = x.clone();
                    goro::spawn(move || {
                        for _ in 0..n {
                            while x.load(SeqCst) != g {
                                std::hint::spin_loop();
                            }
                            x.store(1 - g, SeqCst);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert!(goro::stats().preemptions_async > 0);
        })
    });
}

/// TestPreemptionGC's shape: goroutines spinning without runtime calls
/// while the world is stopped again and again (set_max_procs is goro's
/// stop-the-world); every stop completes.
#[test]
fn preemption_stop_the_world() {
    child("preemption_stop_the_world", &[("GOMAXPROCS", "2")], || {
        goro::run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let stop = stop.clone();
                    goro::spawn(move || spin_until(&stop))
                })
                .collect();
            for i in 0..if qemu() { 10 } else { 50 } {
                goro::set_max_procs(1 + i % 2);
            }
            stop.store(true, SeqCst);
            for h in hs {
                h.join().unwrap();
            }
        })
    });
}

/// TestPingPongHog's workload: two hog goroutines (10^6 increments per
/// turn) and two light ones (10^3) ping-pong through channels on one P for
/// `ms`, and for at least `slices` ends of a time slice (preemptions): the
/// pairs' shares are averaged over slices, and a loaded machine that gives
/// the process little CPU time in `ms` leaves too few of them (a hog count
/// of 2 turns against 595 light ones, 3.4x, in `ping_pong_pairs_share_the_p`
/// under `taskset -c 0` beside 3 CPU hogs, 1 run in 20). Returns the hog
/// and light increment counts.
fn ping_pong_counts(ms: u64, slices: u64) -> (u64, u64) {
    let done = Arc::new(AtomicBool::new(false));
    let (hog_tx, hog_rx) = goro::chan::<bool>(0);
    let (light_tx, light_rx) = goro::chan::<bool>(0);
    let hog_count = Arc::new(AtomicU64::new(0));
    let light_count = Arc::new(AtomicU64::new(0));
    let run = |limit: u64,
               counter: Arc<AtomicU64>,
               tx: goro::Sender<bool>,
               rx: goro::Receiver<bool>,
               done: Arc<AtomicBool>| {
        goro::spawn(move || {
            while !done.load(Relaxed) {
                if rx.recv().is_err() {
                    return;
                }
                for _ in 0..limit {
                    counter.fetch_add(1, Relaxed);
                }
                if tx.send(true).is_err() {
                    return;
                }
            }
        })
    };
    let mut hs = Vec::new();
    for _ in 0..2 {
        hs.push(run(
            1_000_000,
            hog_count.clone(),
            hog_tx.clone(),
            hog_rx.clone(),
            done.clone(),
        ));
        hs.push(run(
            1_000,
            light_count.clone(),
            light_tx.clone(),
            light_rx.clone(),
            done.clone(),
        ));
    }
    let p0 = goro::stats().preemptions;
    hog_tx.send(true).unwrap();
    light_tx.send(true).unwrap();
    goro::time::sleep(Duration::from_millis(ms));
    // Only the pairs compute (this goroutine sleeps): each preemption ends
    // one of their slices. Pairs never preempted hang here, and the
    // child's watchdog (`spawn_child`) fails the test.
    while goro::stats().preemptions - p0 < slices {
        goro::time::sleep(Duration::from_millis(10));
    }
    done.store(true, SeqCst);
    hog_tx.close();
    light_tx.close();
    for h in hs {
        h.join().unwrap();
    }
    (hog_count.load(SeqCst), light_count.load(SeqCst))
}

/// TestPingPongHog: two hog goroutines and two light ones ping-pong
/// through channels on one P; the time-slice inheritance of runnext must
/// not let the hogs crowd out the light pair (counts within a factor 20).
#[test]
fn ping_pong_hog() {
    child("ping_pong_hog", &[ONE_P], || {
        goro::run(|| {
            let (h, l) = ping_pong_counts(if qemu() { 1000 } else { 200 }, 15);
            const FACTOR: u64 = 20;
            assert!(
                h / FACTOR <= l && l / FACTOR <= h,
                "hog count {h} and light count {l} differ by more than {FACTOR}x"
            );
        })
    });
}

/// The same workload, long enough for each pair to get many slices: the
/// pairs must share the P about evenly (within 3x, 5x under qemu). A G
/// run after a preempted one starts a new slice (sched.rs `end_slice`):
/// before, a light G put back at runnext by the pinned hog's hand-off
/// inherited the hog's expired slice and was asked to yield within 0.1–0.3
/// ms, and the hogs got 4.3–5.7x the light pair's share (x86_64) and 7–58x
/// under qemu, which Go's factor of 20 let pass on x86_64.
///
/// Up to 3 runs, one within the factor passes: on a loaded machine the
/// kernel's scheduling of sysmon and of the Ms handing the P between the
/// pairs skews a run's slices either way (the light pair got 6.5x the
/// hogs' count over 40 slices, `taskset -c 0` beside 3 CPU hogs, 1 run in
/// 20), while a bias of the scheduler's own, such as that inherited slice,
/// skews every run the same way.
#[test]
fn ping_pong_pairs_share_the_p() {
    child("ping_pong_pairs_share_the_p", &[ONE_P], || {
        goro::run(|| {
            let factor = if qemu() { 5 } else { 3 };
            let mut runs = Vec::new();
            loop {
                let (h, l) = ping_pong_counts(if qemu() { 1500 } else { 500 }, 40);
                runs.push((h, l));
                if h <= l * factor && l <= h * factor {
                    break;
                }
                assert!(
                    runs.len() < 3,
                    "hog and light counts {runs:?} differ by more than {factor}x in every run"
                );
            }
        })
    });
}

/// TestYieldProgress / TestYieldLockedProgress: a goroutine yielding in a
/// loop does not keep a channel send from completing; nor when locked.
#[test]
fn yield_progress() {
    child("yield_progress", &[ONE_P], || {
        goro::run(|| {
            for locked in [false, true] {
                let (c_tx, c_rx) = goro::chan::<bool>(0);
                let (ack_tx, ack_rx) = goro::chan::<bool>(0);
                let h = goro::spawn(move || {
                    if locked {
                        goro::lock_os_thread();
                    }
                    loop {
                        goro::select! {
                            recv(c_rx) -> _ => { ack_tx.send(true).unwrap(); return; },
                            default => goro::yield_now(),
                        }
                    }
                });
                goro::time::sleep(Duration::from_millis(10));
                c_tx.send(true).unwrap();
                ack_rx.recv().unwrap();
                h.join().unwrap();
            }
        })
    });
}

/// TestNumGoroutine with hogs: the count is exact while goroutines spin
/// without runtime calls on every P.
#[test]
fn num_goroutine_with_hogs() {
    child("num_goroutine_with_hogs", &[("GOMAXPROCS", "2")], || {
        goro::run(|| {
            let base = goro::num_goroutine();
            let stop = Arc::new(AtomicBool::new(false));
            let hs: Vec<_> = (0..6)
                .map(|_| {
                    let stop = stop.clone();
                    goro::spawn(move || spin_until(&stop))
                })
                .collect();
            assert_eq!(goro::num_goroutine(), base + 6);
            // The main goroutine itself gets the P back again and again.
            for _ in 0..5 {
                goro::time::sleep(Duration::from_millis(5));
                assert_eq!(goro::num_goroutine(), base + 6);
            }
            stop.store(true, SeqCst);
            for h in hs {
                h.join().unwrap();
            }
            // A joined goroutine is counted until its goexit completes.
            while goro::num_goroutine() != base {
                goro::yield_now();
            }
        })
    });
}

// ---------------------------------------------------------------------------
// Latency beside a hog.

/// A goroutine sleeping 10 ms in a loop beside a hog on one P keeps waking
/// (the hog is preempted every time slice). Without preemption it never
/// wakes again (the hog spins until the sleeper is done): a hang. The
/// bound is on the median lateness and generous (the 10 ms slice plus
/// scheduling noise on a loaded CI machine); the benchmark measures it
/// precisely. Not the worst: a machine that stalls the process now and
/// then makes one sleep late whatever the scheduler does (315 ms against
/// the former 250 ms bound on the worst, `taskset -c 0` beside 3 CPU hogs,
/// 1 run in 20), while a hog preempted late or not every slice makes most
/// of them late.
#[test]
fn sleeper_beside_hog() {
    child("sleeper_beside_hog", &[ONE_P], || {
        goro::run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let hog = {
                let stop = stop.clone();
                goro::spawn(move || spin_until(&stop))
            };
            let mut late = Vec::new();
            for _ in 0..if qemu() { 10 } else { 30 } {
                let t = Instant::now();
                goro::time::sleep(Duration::from_millis(10));
                late.push(t.elapsed() - Duration::from_millis(10));
            }
            stop.store(true, SeqCst);
            hog.join().unwrap();
            late.sort();
            let (median, worst) = (late[late.len() / 2], late[late.len() - 1]);
            let bound = Duration::from_millis(if qemu() { 2000 } else { 250 });
            assert!(
                median < bound,
                "median lateness {median:?} (worst {worst:?})"
            );
            let st = goro::stats();
            assert!(st.preemptions_async > 0, "{st:?}");
            println!("median lateness {median:?}, worst lateness {worst:?}, {st:?}");
        })
    });
}

/// The same with the hog in migrating mode (Go's behaviour).
#[test]
fn sleeper_beside_hog_migrate() {
    child(
        "sleeper_beside_hog_migrate",
        &[ONE_P, ("GODEBUG", "goropreempt=migrate")],
        || {
            goro::run(|| {
                let stop = Arc::new(AtomicBool::new(false));
                let hog = {
                    let stop = stop.clone();
                    goro::spawn(move || spin_until(&stop))
                };
                for _ in 0..10 {
                    goro::time::sleep(Duration::from_millis(10));
                }
                stop.store(true, SeqCst);
                hog.join().unwrap();
                let st = settled_pins();
                assert!(st.preemptions_async > 0, "{st:?}");
                assert_eq!(st.pinned_threads, 0, "{st:?}");
            })
        },
    );
}

/// GODEBUG=asyncpreemptoff=1: no signal-based preemption happens (a hog
/// with finite work then delays the goroutine it readied by its whole
/// length).
#[test]
fn asyncpreemptoff() {
    child(
        "asyncpreemptoff",
        &[ONE_P, ("GODEBUG", "asyncpreemptoff=1,gorodetect=0")],
        || {
            goro::run(|| {
                // The hog readies us as it starts (a buffered send does not
                // yield), then computes for 200 ms without a runtime call:
                // with async preemption off we run again only after it.
                let (tx, rx) = goro::chan::<()>(1);
                let t = Instant::now();
                let hog = goro::spawn(move || {
                    tx.send(()).unwrap();
                    let t = Instant::now();
                    let mut x = 0u64;
                    while t.elapsed() < Duration::from_millis(200) {
                        x = x.wrapping_add(1);
                    }
                    x
                });
                rx.recv().unwrap();
                let slept = t.elapsed();
                hog.join().unwrap();
                assert_eq!(goro::stats().preemptions_async, 0);
                assert!(slept >= Duration::from_millis(150), "slept {slept:?}");
            })
        },
    );
}

/// Context switches (voluntary and not) of the runtime thread named
/// `comm` so far (its first match in /proc/self/task).
fn thread_switches(comm: &str) -> u64 {
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if name.trim() != comm {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        return status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .map(|l| l.split(':').nth(1).unwrap().trim().parse::<u64>().unwrap())
            .sum();
    }
    panic!("no thread named {comm}");
}

/// The longest time slice `gorotimeslice` accepts (u64::MAX µs, likewise
/// `Config::time_slice(Duration::MAX)`: "never preempt") must mean a slice
/// that never ends, not one that wraps. sysmon computed the slice's end as
/// `schedwhen + slice` as soon as a goroutine ran while another waited
/// (h45): a debug build's sysmon panicked ("attempt to add with
/// overflow"), which aborts the process (SIGABRT: sysmon is an
/// `extern "C"` thread). A release build wrapped that sum and then wrapped
/// back when subtracting the clock from it, so only the debug build (plain
/// `cargo test`) shows the bug. The count of sysmon's context switches
/// checks that the end is far away, not in the past: sysmon backs off to
/// 10 ms ticks (about 80 switches in the 300 ms the spinning goroutine
/// runs, the scenario), where a deadline in the past would wake it every
/// 20 µs (thousands).
#[test]
fn huge_time_slice_does_not_wrap() {
    let us = u64::MAX.to_string();
    let godebug = format!("gorotimeslice={us},gorodetect=0");
    child(
        "huge_time_slice_does_not_wrap",
        &[ONE_P, ("GODEBUG", &godebug)],
        || {
            goro::run(|| {
                // Queued behind us on the only P: work that waits.
                let waiter = goro::spawn(|| 1);
                let before = thread_switches("goro-sysmon");
                let t = Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                let switches = thread_switches("goro-sysmon") - before;
                assert_eq!(waiter.join().unwrap(), 1);
                assert!(switches < 1000, "sysmon switched {switches} times");
            })
        },
    );
}

/// With async preemption off (as with a statically linked libc), a
/// goroutine queued on the P of a loop that never yields can only be
/// stolen; when the other P's thread is blocked in an unwrapped std call
/// nobody steals it, unless sysmon hands that P off. sysmon probed a
/// Running P for a blocked call only when work waited on that P or the
/// global queue, never on another P's queue (h37: 10 std socket readers
/// waited the hog's whole 8 s in 7 of 8 runs; Go 0.3 s: its retake
/// counts work anywhere when no P is idle and no M spins). Here the
/// server's writes sit behind the hog; the hog spins until every reader
/// has its data or 20 s (60 s under qemu) pass, a hang bound, and then
/// checks which came first.
#[test]
fn stranded_work_beside_a_blocked_call_without_async_preemption() {
    child(
        "stranded_work_beside_a_blocked_call_without_async_preemption",
        &[("GOMAXPROCS", "2"), ("GODEBUG", "asyncpreemptoff=1")],
        || {
            use std::io::{Read, Write};
            goro::run(|| {
                const READERS: usize = 10;
                let done = Arc::new(AtomicUsize::new(0));
                let hog = {
                    let done = done.clone();
                    goro::spawn(move || {
                        let t = Instant::now();
                        let bound = Duration::from_secs(if qemu() { 60 } else { 20 });
                        while done.load(SeqCst) < READERS && t.elapsed() < bound {
                            std::hint::spin_loop();
                        }
                        done.load(SeqCst)
                    })
                };
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = l.local_addr().unwrap();
                let server = goro::spawn(move || {
                    let conns: Vec<_> = (0..READERS).map(|_| l.accept().unwrap().0).collect();
                    std::thread::sleep(Duration::from_millis(100));
                    for mut c in conns {
                        c.write_all(b"x").unwrap();
                    }
                });
                let readers: Vec<_> = (0..READERS)
                    .map(|_| {
                        let done = done.clone();
                        goro::spawn(move || {
                            let mut c = std::net::TcpStream::connect(addr).unwrap();
                            let mut b = [0u8; 1];
                            loop {
                                match c.read(&mut b) {
                                    Ok(1) => break,
                                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                    r => panic!("read: {r:?}"),
                                }
                            }
                            done.fetch_add(1, SeqCst);
                        })
                    })
                    .collect();
                for r in readers {
                    r.join().unwrap();
                }
                server.join().unwrap();
                let seen = hog.join().unwrap();
                assert_eq!(
                    seen,
                    READERS,
                    "the hog's bound passed first: work queued behind it was stranded ({:?})",
                    goro::stats()
                );
            })
        },
    );
}

/// The same with a due timer instead of a queued goroutine: the loop's P
/// holds the sleeper's timer, the other P's thread is blocked in an
/// unwrapped std read, and with async preemption off only a handed-off P
/// can run the timer (its M steals timers in findrunnable). sysmon's
/// stranded-work test saw only run queues, so a 100 ms sleep took the
/// hog's whole run (h38: 5.03 s of a 5 s hog in 6 of 6 runs; Go 100 ms).
/// The hog spins until the sleeper is back or 20 s (60 s under qemu)
/// pass, a hang bound, and then checks which came first.
#[test]
fn due_timer_beside_a_blocked_call_without_async_preemption() {
    child(
        "due_timer_beside_a_blocked_call_without_async_preemption",
        &[("GOMAXPROCS", "2"), ("GODEBUG", "asyncpreemptoff=1")],
        || {
            use std::io::{Read, Write};
            goro::run(|| {
                let (mut wake, mut blocked) = std::os::unix::net::UnixStream::pair().unwrap();
                let started = Arc::new(AtomicBool::new(false));
                // Holds the other P's thread in a std read until main is
                // back. Main spins until it starts, so that it runs there
                // (stolen) and wakes nobody onto its own P: a G queued
                // there would have the blocked thread probed anyway.
                let reader = goro::spawn({
                    let started = started.clone();
                    move || {
                        started.store(true, SeqCst);
                        let mut b = [0u8; 1];
                        loop {
                            match blocked.read(&mut b) {
                                Ok(1) => break,
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                r => panic!("read: {r:?}"),
                            }
                        }
                    }
                });
                while !started.load(SeqCst) {
                    std::hint::spin_loop();
                }
                let back = Arc::new(AtomicBool::new(false));
                // Spawned onto main's P, it runs there once main sleeps,
                // beside main's timer.
                let hog = {
                    let back = back.clone();
                    goro::spawn(move || {
                        let t = Instant::now();
                        let bound = Duration::from_secs(if qemu() { 60 } else { 20 });
                        while !back.load(SeqCst) && t.elapsed() < bound {
                            std::hint::spin_loop();
                        }
                        back.load(SeqCst)
                    })
                };
                let t = Instant::now();
                goro::time::sleep(Duration::from_millis(100));
                let slept = t.elapsed();
                back.store(true, SeqCst);
                wake.write_all(b"x").unwrap();
                reader.join().unwrap();
                let first = hog.join().unwrap();
                assert!(
                    first,
                    "the hog's bound passed first: a 100 ms sleep took {slept:?} ({:?})",
                    goro::stats()
                );
            })
        },
    );
}

// ---------------------------------------------------------------------------
// Where a preemption lands: at goro::sync calls, not inside critical sections.

/// Go checks its preemption flag at every function prologue, so a
/// goroutine that sysmon asks to yield almost always stops at its next
/// call, before the signal sent with the request arrives. goro's check
/// points are its runtime entries; each goro::sync call below that may
/// park anyway is one, so that a loop over lock, compute, unlock (or a
/// Cond queue) yields at a lock, not asynchronously at an arbitrary
/// instruction inside its critical section. Calls that never park
/// (`Cond::notify_*`, `Semaphore::release`, `try_*`) stay no switch points.
/// Before: none of these checked; a Cond queue at
/// GOMAXPROCS = 1 took every one of its preemptions asynchronously (72 of
/// 72), mostly inside the critical section, and ran 1.7x slower than
/// without preemption (the woken waiters' WOKEN bit then sent every
/// lock and unlock down the slow path until the next preemption).
#[test]
fn sync_calls_are_preemption_points() {
    child("sync_calls_are_preemption_points", &[ONE_P], || {
        goro::run(|| {
            use goro::sync::{Mutex, RwLock, Semaphore};
            let m = Mutex::new(0u64);
            let rw = RwLock::new(0u64);
            let sem = Semaphore::new(1);
            // A std writer (not a check point) and a goro reader.
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let b = goro::net::UnixStream::from(std::os::fd::OwnedFd::from(b));
            type Op<'a> = Box<dyn Fn() + 'a>;
            let ops: Vec<(&str, Op)> = vec![
                ("Mutex::lock", Box::new(|| *m.lock() += 1)),
                (
                    "RwLock::read",
                    Box::new(|| {
                        std::hint::black_box(*rw.read());
                    }),
                ),
                ("RwLock::write", Box::new(|| *rw.write() += 1)),
                (
                    "Semaphore::acquire",
                    Box::new(|| {
                        sem.acquire();
                        sem.release();
                    }),
                ),
                ("goro::net read", {
                    use std::io::{Read, Write};
                    (&a).write_all(b"x").unwrap();
                    Box::new(move || {
                        let mut byte = [0u8];
                        (&b).read_exact(&mut byte).unwrap();
                        (&a).write_all(b"x").unwrap();
                    })
                }),
            ];
            let mut missing = Vec::new();
            for (name, op) in ops {
                let before = goro::stats().preemptions;
                goro::__private::request_preempt();
                op();
                if goro::stats().preemptions == before {
                    missing.push(name);
                    // Leave no request behind for the next op.
                    goro::yield_now();
                }
            }
            assert!(missing.is_empty(), "not preemption points: {missing:?}");
        })
    });
}

/// Go's wantAsyncPreempt: the SIGURG handler preempts only a G whose flag
/// is still set. sysmon sets the flag and signals together; a G that
/// yields at a check point first clears it, and the signal then finds the
/// next G running with its flag clear. Stopping that one would preempt a
/// G nobody asked to stop, at an arbitrary instruction (possibly holding
/// a lock). A request with the flag set is the control: it must preempt.
#[test]
fn stale_preemption_signal_is_ignored() {
    child("stale_preemption_signal_is_ignored", &[ONE_P], || {
        goro::run(|| {
            let m = goro::__private::current_m();
            for (set_flag, want) in [(true, 1), (false, 0), (true, 1)] {
                // A signal that lands outside the executable's code (in
                // libc or the vDSO) is refused, not ignored: try again.
                let mut tries = 0;
                let got = loop {
                    let before = goro::stats();
                    let spinning = Arc::new(AtomicBool::new(false));
                    let sender = {
                        let spinning = spinning.clone();
                        std::thread::spawn(move || {
                            while !spinning.load(SeqCst) {
                                std::hint::spin_loop();
                            }
                            goro::__private::send_preempt_signal(m, set_flag)
                        })
                    };
                    // Compute, with no call out of this binary, until the
                    // handler (on this thread) has taken the request.
                    spinning.store(true, SeqCst);
                    let mut spins = 0u64;
                    while !sender.is_finished() || goro::__private::preempt_signal_pending(m) {
                        std::hint::spin_loop();
                        spins += 1;
                        assert!(spins < 1 << 40, "signal never handled");
                    }
                    sender.join().unwrap();
                    let after = goro::stats();
                    tries += 1;
                    if after.preempt_refused == before.preempt_refused || tries == 20 {
                        break after.preemptions_async - before.preemptions_async;
                    }
                };
                assert_eq!(got, want, "flag set: {set_flag} ({tries} tries)");
            }
        })
    });
}

// ---------------------------------------------------------------------------
// Register state across preemptions.

/// Floating-point and integer SIMD work whose every intermediate lives in
/// vector registers (SSE2 / AVX2 on x86_64, NEON on aarch64), folded into a
/// checksum.
#[cfg(target_arch = "x86_64")]
fn simd_work(iters: u64) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline.
    unsafe {
        let mut a = _mm_set_ps(1.0, 2.0, 3.0, 4.0);
        let k = _mm_set_ps(1.000_1, 0.999_9, 1.000_07, 0.999_93);
        let c = _mm_set1_ps(1e-3);
        let mut b = _mm_set_epi32(0x0123_4567, 0x89ab_cdefu32 as i32, 0x0f1e_2d3c, 0x4b5a_6978);
        let mut d = _mm_set_pd(1.5, -2.25);
        let kd = _mm_set_pd(0.999_999, 1.000_001);
        for _ in 0..iters {
            a = _mm_add_ps(_mm_mul_ps(a, k), c);
            b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x39));
            b = _mm_xor_si128(b, _mm_slli_epi32(b, 3));
            d = _mm_mul_pd(d, kd);
        }
        let mut out = [0u64; 6];
        _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_castps_si128(a));
        _mm_storeu_si128(out[2..].as_mut_ptr().cast(), b);
        _mm_storeu_si128(out[4..].as_mut_ptr().cast(), _mm_castpd_si128(d));
        let mut h = out.iter().fold(0u64, |h, v| h.rotate_left(7) ^ v);
        if is_x86_feature_detected!("avx2") {
            h ^= avx2_work(iters);
        }
        h
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_work(iters: u64) -> u64 {
    use std::arch::x86_64::*;
    let mut a = _mm256_set_ps(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0);
    let k = _mm256_set1_ps(1.000_03);
    let mut b = _mm256_set1_epi64x(0x0123_4567_89ab_cdef);
    for _ in 0..iters {
        a = _mm256_sub_ps(_mm256_mul_ps(a, k), _mm256_set1_ps(1e-4));
        b = _mm256_add_epi64(b, _mm256_permute4x64_epi64(b, 0x39));
    }
    let mut out = [0u64; 8];
    _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm256_castps_si256(a));
    _mm256_storeu_si256(out[4..].as_mut_ptr().cast(), b);
    out.iter().fold(0u64, |h, v| h.rotate_left(9) ^ v)
}

#[cfg(target_arch = "aarch64")]
fn simd_work(iters: u64) -> u64 {
    use std::arch::aarch64::*;
    // SAFETY: NEON is part of the aarch64 baseline.
    unsafe {
        let mut a = vld1q_f32([1.0f32, 2.0, 3.0, 4.0].as_ptr());
        let k = vld1q_f32([1.000_1f32, 0.999_9, 1.000_07, 0.999_93].as_ptr());
        let c = vdupq_n_f32(1e-3);
        let mut b = vld1q_u32([0x0123_4567u32, 0x89ab_cdef, 0x0f1e_2d3c, 0x4b5a_6978].as_ptr());
        let mut d = vld1q_f64([1.5f64, -2.25].as_ptr());
        let kd = vld1q_f64([0.999_999f64, 1.000_001].as_ptr());
        for _ in 0..iters {
            a = vaddq_f32(vmulq_f32(a, k), c);
            b = vaddq_u32(b, vextq_u32(b, b, 1));
            b = veorq_u32(b, vshlq_n_u32(b, 3));
            d = vmulq_f64(d, kd);
        }
        let mut out = [0u64; 6];
        vst1q_u64(out.as_mut_ptr(), vreinterpretq_u64_f32(a));
        vst1q_u64(out[2..].as_mut_ptr(), vreinterpretq_u64_u32(b));
        vst1q_u64(out[4..].as_mut_ptr(), vreinterpretq_u64_f64(d));
        out.iter().fold(0u64, |h, v| h.rotate_left(7) ^ v)
    }
}

/// A 128-bit sum computed with add-with-carry: the carry flag is live
/// between the two instructions, where a preemption must preserve it.
fn carry_chain(iters: u64) -> (u64, u64) {
    let (mut lo, mut hi) = (0u64, 0u64);
    for i in 0..iters {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | (1 << 63);
        // SAFETY: register-only arithmetic.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::asm!(
                "add {lo}, {x}",
                "adc {hi}, 0",
                lo = inout(reg) lo,
                hi = inout(reg) hi,
                x = in(reg) x,
            );
        }
        // SAFETY: register-only arithmetic.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            core::arch::asm!(
                "adds {lo}, {lo}, {x}",
                "adc {hi}, {hi}, xzr",
                lo = inout(reg) lo,
                hi = inout(reg) hi,
                x = in(reg) x,
            );
        }
    }
    (lo, hi)
}

fn carry_chain_expected(iters: u64) -> (u64, u64) {
    let mut s = 0u128;
    for i in 0..iters {
        s += (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | (1 << 63)) as u128;
    }
    (s as u64, (s >> 64) as u64)
}

/// Hogs computing with vector registers and live integer flags get
/// bit-exact results across thousands of preemptions (a 200 µs time slice
/// and three hogs on one P).
#[test]
fn register_state_survives_preemption() {
    child(
        "register_state_survives_preemption",
        &[ONE_P, ("GODEBUG", "gorotimeslice=200")],
        || {
            let simd_iters = if qemu() { 200_000 } else { 20_000_000 };
            let carry_iters = if qemu() { 500_000 } else { 50_000_000 };
            // Reference values on a plain thread, before the runtime starts.
            let simd_ref = simd_work(simd_iters);
            let carry_ref = carry_chain_expected(carry_iters);
            goro::run(move || {
                let mut hs = Vec::new();
                for _ in 0..2 {
                    hs.push(goro::spawn(move || {
                        let mut bad = 0;
                        for _ in 0..3 {
                            if simd_work(simd_iters) != simd_ref {
                                bad += 1;
                            }
                        }
                        bad
                    }));
                }
                hs.push(goro::spawn(move || {
                    let mut bad = 0;
                    for _ in 0..3 {
                        if carry_chain(carry_iters) != carry_ref {
                            bad += 1;
                        }
                    }
                    bad
                }));
                let bad: i32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
                let st = goro::stats();
                println!("{st:?}");
                assert_eq!(
                    bad, 0,
                    "corrupted results after {} preemptions",
                    st.preemptions_async
                );
                let want = if qemu() { 5 } else { 200 };
                assert!(
                    st.preemptions_async >= want,
                    "only {} preemptions",
                    st.preemptions_async
                );
            })
        },
    );
}

// ---------------------------------------------------------------------------
// Thread affinity in pinned mode.

/// Four hogs `println!` fixed lines in tight loops on one P: std's stdout
/// lock (a reentrant lock owned by a thread id) is held at many preemption
/// points. Every line comes out intact; no panic, no deadlock.
#[test]
fn pinned_println_hogs() {
    const LINE: &str = "the quick brown fox jumps over the lazy dog 0123456789";
    let name = "pinned_println_hogs";
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        goro::run(|| {
            let n = if qemu() { 500 } else { 20_000 };
            // Ends the harness's "test ... " line, which has no newline.
            println!();
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    goro::spawn(move || {
                        for _ in 0..n {
                            println!("{i} {LINE}");
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            eprintln!("{:?}", goro::stats());
        });
        return;
    }
    let out = spawn_child(name, &[ONE_P, ("GODEBUG", "gorotimeslice=200")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut counts = [0usize; 4];
    for l in stdout.lines() {
        if l.starts_with("running ")
            || l.starts_with("test ")
            || l.is_empty()
            || l.contains("test result")
            || l.starts_with("successes")
            || l == "ok"
        {
            continue;
        }
        let (i, rest) = l.split_once(' ').unwrap_or(("x", l));
        assert_eq!(rest, LINE, "mangled line {l:?}");
        counts[i.parse::<usize>().expect("goroutine index")] += 1;
    }
    let n = if qemu() { 500 } else { 20_000 };
    assert_eq!(counts, [n; 4]);
}

std::thread_local! {
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static COUNT: std::cell::RefCell<u64> = const { std::cell::RefCell::new(0) };
}

/// Many hogs update a `thread_local!` inside windows where another
/// goroutine running on the same thread, or the window resuming on another
/// thread, would be visible: the window's flag is set, a `RefCell` borrow is
/// held, and the thread id must not change. Pinned mode keeps all three.
#[test]
fn pinned_thread_local_windows() {
    child(
        "pinned_thread_local_windows",
        &[("GOMAXPROCS", "2"), ("GODEBUG", "gorotimeslice=200")],
        || {
            goro::run(|| {
                let rounds = if qemu() { 30_000 } else { 200_000 };
                let hs: Vec<_> = (0..6)
                    .map(|_| {
                        goro::spawn(move || {
                            for round in 0..rounds {
                                window();
                                // A cooperative switch point now and then,
                                // where migrating is allowed.
                                if round % 50_000 == 0 {
                                    goro::yield_now();
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                let st = goro::stats();
                println!("{st:?}");
                assert!(st.preemptions_async > 0, "{st:?}");
            })
        },
    );
}

/// One window of pinned_thread_local_windows. Not inlined: LLVM caches a
/// thread-local's address within a function, which across the caller's
/// cooperative switch point (`yield_now`, where migrating is allowed) would
/// be the previous thread's (the hazard docs/PREEMPTION.md describes).
#[inline(never)]
fn window() {
    // A thread-local identity (no system call: the window stays in the
    // executable's own code, where preemption may land).
    let tid = std::thread::current().id();
    INSIDE.with(|f| {
        assert!(!f.get(), "another goroutine ran inside the window");
        f.set(true);
    });
    COUNT.with(|c| {
        let mut b = c.borrow_mut();
        let v = *b;
        let mut x = v;
        for k in 0..200u64 {
            x = std::hint::black_box(x.wrapping_add(k));
        }
        std::hint::black_box(x);
        *b = v + 1;
    });
    INSIDE.with(|f| f.set(false));
    assert_eq!(
        tid,
        std::thread::current().id(),
        "resumed on another thread"
    );
}

/// A hog holding a `std::sync::Mutex` while preempted does not deadlock
/// the program with GOMAXPROCS = 1: the others block on the lock in the
/// kernel, blocking detection hands their P on, and the holder resumes.
#[test]
fn pinned_std_mutex_hogs() {
    child(
        "pinned_std_mutex_hogs",
        &[ONE_P, ("GODEBUG", "gorotimeslice=200")],
        || {
            goro::run(|| {
                let m = Arc::new(std::sync::Mutex::new(0u64));
                let rounds = if qemu() { 200 } else { 5_000 };
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        let m = m.clone();
                        goro::spawn(move || {
                            for _ in 0..rounds {
                                let mut g = m.lock().unwrap();
                                let v = *g;
                                let mut x = 0u64;
                                for k in 0..20_000u64 {
                                    x = std::hint::black_box(x ^ k);
                                }
                                std::hint::black_box(x);
                                *g = v + 1;
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                assert_eq!(*m.lock().unwrap(), 4 * rounds);
                println!("{:?}", goro::stats());
            })
        },
    );
}

/// At `preempt_pinned_max` sleeping threads, further async preemptions are
/// refused (counted) and the program still completes: hogs with finite work
/// run to their end.
#[test]
fn pinned_limit() {
    child(
        "pinned_limit",
        &[ONE_P, ("GODEBUG", "gorotimeslice=200,goropinnedmax=1")],
        || {
            goro::run(|| {
                let hs: Vec<_> = (0..3)
                    .map(|_| {
                        goro::spawn(|| {
                            let t = Instant::now();
                            let mut x = 0u64;
                            while t.elapsed()
                                < Duration::from_millis(if qemu() { 300 } else { 100 })
                            {
                                x = std::hint::black_box(x + 1);
                            }
                            x
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                let st = settled_pins();
                println!("{st:?}");
                assert!(st.preempt_pinned_limit > 0, "{st:?}");
                assert_eq!(st.pinned_threads, 0, "{st:?}");
            })
        },
    );
}

/// Goroutines parked while unwinding a panic keep their threads (pinned
/// for std's thread-local panic count), but those pins are not async
/// preemptions and do not use up `preempt_pinned_max`: with two unwinders
/// parked and a limit of 1, a hog is still preempted. Before the fix the
/// two pins counted, every preemption of the hog was refused at the limit,
/// and main never ran again (the child hung; h30).
#[test]
fn pinned_limit_ignores_parked_unwinders() {
    child(
        "pinned_limit_ignores_parked_unwinders",
        &[ONE_P, ("GODEBUG", "gorotimeslice=200,goropinnedmax=1")],
        || {
            goro::run(|| {
                // Main takes no pin of its own when preempted: a locked G
                // keeps its M anyway. Unlocked, main could be preempted
                // with the hog runnable (200 µs slices under qemu), hold
                // the one pin the limit allows, and wait for the P while
                // every preemption of the hog was refused at that limit:
                // the child hung (CI, session 33: 21 of 180 qemu runs, the
                // dump showing main runnable, pinned to its M).
                goro::lock_os_thread();
                struct ParkOnDrop {
                    parked: goro::Sender<()>,
                    wake: goro::Receiver<()>,
                }
                impl Drop for ParkOnDrop {
                    fn drop(&mut self) {
                        self.parked.send(()).unwrap();
                        self.wake.recv().unwrap();
                    }
                }
                let (parked_tx, parked_rx) = goro::chan::<()>(2);
                let (wake_tx, wake_rx) = goro::chan::<()>(0);
                let unwinders: Vec<_> = (0..2)
                    .map(|_| {
                        let d = ParkOnDrop {
                            parked: parked_tx.clone(),
                            wake: wake_rx.clone(),
                        };
                        goro::spawn(move || {
                            let _d = d;
                            panic!("boom (expected by the test)");
                        })
                    })
                    .collect();
                parked_rx.recv().unwrap();
                parked_rx.recv().unwrap();
                // Both unwinders are parked in `recv` (pinned, Required)
                // or about to be: one preempted between its `parked` send
                // and its `recv` holds a Preempted pin until it runs again,
                // which main's yields let it do (CI saw 1 here once, with
                // 200 µs slices). Counted unwinders never return to 0.
                let st = settled_pins();
                assert_eq!(st.pinned_threads, 0, "unwinders counted: {st:?}");
                let stop = Arc::new(AtomicBool::new(false));
                let hog = {
                    let stop = stop.clone();
                    goro::spawn(move || spin_until(&stop))
                };
                // Main runs again only once the hog is preempted.
                goro::yield_now();
                stop.store(true, Relaxed);
                hog.join().unwrap();
                wake_tx.send(()).unwrap();
                wake_tx.send(()).unwrap();
                for u in unwinders {
                    assert!(u.join().is_err());
                }
                let st = goro::stats();
                println!("{st:?}");
                assert!(st.preemptions_async > 0, "{st:?}");
            })
        },
    );
}

/// Goroutines that allocate all the time, on one P with 100 µs slices,
/// all complete. With libc linked into the executable (`.ci/run` builds
/// this test once more with `-C target-feature=+crt-static`) the signal
/// would stop goroutines inside `malloc`, holding its arena lock while
/// they wait, pinned, for a P; the thread creating an M for that P then
/// blocked on the lock (h32: the child hung 3 of 3). There async
/// preemption is off and reported (each goroutine's work is finite, so
/// they complete in turn); with a shared libc it stays on and preempts
/// inside the program's own code.
#[test]
fn allocating_goroutines_complete_with_any_libc() {
    child(
        "allocating_goroutines_complete_with_any_libc",
        &[ONE_P, ("GODEBUG", "gorotimeslice=100")],
        || {
            goro::run(|| {
                let rounds = if qemu() { 20_000u64 } else { 100_000 };
                let hs: Vec<_> = (0..32u64)
                    .map(|i| {
                        goro::spawn(move || {
                            let mut v: Vec<Vec<u8>> = Vec::new();
                            let mut k = i;
                            for _ in 0..rounds {
                                churn(&mut v, &mut k, true);
                            }
                            v.len()
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                let st = goro::stats();
                println!("{st:?}");
                let static_libc = cfg!(target_feature = "crt-static");
                assert_eq!(st.async_preempt_static_libc, static_libc, "{st:?}");
                if static_libc {
                    assert_eq!(st.preemptions_async, 0, "{st:?}");
                } else {
                    assert!(st.preemptions_async > 0, "{st:?}");
                }
            })
        },
    );
}

/// One step of the allocating tests' malloc churn: allocates a block of a
/// pseudo-random size (1 B to 4 KiB; with `mmap_sizes`, one in 97 is
/// 300,000 B, malloc's mmap path) and keeps at most 64, freeing one at
/// random. `k` is the generator's state.
fn churn(v: &mut Vec<Vec<u8>>, k: &mut u64, mmap_sizes: bool) {
    *k = k
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let size = if mmap_sizes && *k % 97 == 0 {
        300_000 // the mmap path
    } else {
        (*k >> 40) as usize % 4096 + 1
    };
    v.push(vec![1u8; size]);
    if v.len() > 64 {
        v.swap_remove((*k >> 20) as usize % v.len());
    }
}

/// The same for goroutines that compute without a P: each sleeps in an
/// unwrapped call (blocking detection detaches its P) and then allocates
/// with no runtime call, which sysmon answers by signalling its thread to
/// take a P back (a detached G is stopped as a preempted one is). With
/// libc linked in, that stop landed inside `malloc` too: async preemption
/// was off only for Gs that held a P (h38: hung 6 of 6 with one malloc
/// arena). One arena (GLIBC_TUNABLES) makes every allocation contend for
/// the lock a stopped G would hold. Now a detached G is not stopped where
/// async preemption is off, and sysmon does not signal it.
#[test]
fn allocating_goroutines_complete_with_any_libc_when_detached() {
    child(
        "allocating_goroutines_complete_with_any_libc_when_detached",
        &[
            ("GOMAXPROCS", "2"),
            ("GODEBUG", "gorotimeslice=100"),
            ("GLIBC_TUNABLES", "glibc.malloc.arena_max=1"),
        ],
        || {
            goro::run(|| {
                // Four goroutines for two Ps, so that Ps are handed off;
                // the stop deadlocked only when sysmon or the template
                // thread allocated meanwhile (both found blocked in malloc
                // beside two pinned Gs stopped there), 4 of 6 runs of this
                // length hung before the fix.
                let (rounds, allocs) = if qemu() {
                    (30, 5_000u64)
                } else {
                    (150, 20_000)
                };
                let hs: Vec<_> = (0..4u64)
                    .map(|i| {
                        goro::spawn(move || {
                            let mut v: Vec<Vec<u8>> = Vec::new();
                            let mut k = i;
                            for _ in 0..rounds {
                                std::thread::sleep(Duration::from_millis(2));
                                for _ in 0..allocs {
                                    churn(&mut v, &mut k, false);
                                }
                            }
                            v.len()
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                let st = goro::stats();
                println!("{st:?}");
                assert!(st.retakes_detected > 0, "{st:?}");
                let static_libc = cfg!(target_feature = "crt-static");
                assert_eq!(st.async_preempt_static_libc, static_libc, "{st:?}");
            })
        },
    );
}

// ---------------------------------------------------------------------------
// System calls.

/// Eight goroutines each sleeping 10 × 50 ms in the kernel inside
/// `blocking`, on one P, overlap: about 0.5 s, not 4 s. Meanwhile a ticker
/// and a channel ping-pong of other goroutines keep going.
#[test]
fn blocking_guarded_overlaps() {
    child("blocking_guarded_overlaps", &[ONE_P], || {
        goro::run(|| blocking_overlap(true))
    });
}

/// The same with a bare `std::thread::sleep` (no guard): blocking detection
/// hands the P on.
#[test]
fn blocking_unguarded_detected() {
    child("blocking_unguarded_detected", &[ONE_P], || {
        goro::run(|| {
            blocking_overlap(false);
            let st = goro::stats();
            assert!(st.retakes_detected > 0, "{st:?}");
        })
    });
}

fn blocking_overlap(guarded: bool) {
    let t = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (stop, ticks) = (stop.clone(), ticks.clone());
        goro::spawn(move || {
            let tick = goro::time::tick(Duration::from_millis(10));
            while !stop.load(Relaxed) {
                tick.recv().unwrap();
                ticks.fetch_add(1, Relaxed);
            }
        })
    };
    let (ping_tx, ping_rx) = goro::chan::<u64>(0);
    let pinger = {
        let stop = stop.clone();
        goro::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                ping_tx.send(n).unwrap();
                n += 1;
                goro::time::sleep(Duration::from_millis(1));
            }
        })
    };
    let ponger = goro::spawn(move || ping_rx.iter().count());
    // Sleepers inside their sleep now, and the most seen at once.
    let (asleep, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (asleep, most) = (asleep.clone(), most.clone());
            goro::spawn(move || {
                for _ in 0..10 {
                    let nap = || {
                        most.fetch_max(asleep.fetch_add(1, SeqCst) + 1, SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        asleep.fetch_sub(1, SeqCst);
                    };
                    if guarded {
                        goro::blocking(nap);
                    } else {
                        nap();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let el = t.elapsed();
    stop.store(true, SeqCst);
    ticker.join().unwrap();
    pinger.join().unwrap();
    let pongs = ponger.join().unwrap();
    let st = goro::stats();
    let most = most.load(SeqCst);
    println!(
        "{el:?}, at most {most} asleep at once, ticks {} pongs {pongs} {st:?}",
        ticks.load(SeqCst)
    );
    // Serialised on one P the sleeps take 4 s, one at a time; overlapped,
    // ~0.5 s. Checked by the overlap itself, not the time (a bound on the
    // time, 2.5 s, is a speed check a slow machine can fail): a P that is
    // never handed on runs one sleeper at a time.
    assert!(most >= 2, "the sleeps never overlapped ({el:?})");
    assert!(
        ticks.load(SeqCst) >= 10,
        "ticker starved: {}",
        ticks.load(SeqCst)
    );
    assert!(pongs >= 10, "channel traffic starved: {pongs}");
    assert!(st.syscalls_handed_off >= 7, "{st:?}");
}

/// A short guarded call keeps the P (no hand-off when nobody waits):
/// 100,000 guarded getpid calls on one P cost no thread wake-ups.
#[test]
fn short_syscalls_keep_the_p() {
    child("short_syscalls_keep_the_p", &[ONE_P], || {
        goro::run(|| {
            let before = goro::stats();
            for _ in 0..if qemu() { 10_000 } else { 100_000 } {
                let g = goro::enter_syscall();
                // SAFETY: getpid has no preconditions.
                unsafe { libc::syscall(libc::SYS_getpid) };
                goro::exit_syscall(g);
            }
            let after = goro::stats();
            // sysmon may catch one call in flight now and then; an eager
            // hand-off would be 100,000.
            assert!(
                after.syscalls_handed_off - before.syscalls_handed_off < 100,
                "{after:?}"
            );
        })
    });
}

/// `enter_syscall_block` hands the P off at once.
#[test]
fn enter_syscall_block_hands_off() {
    child("enter_syscall_block_hands_off", &[ONE_P], || {
        goro::run(|| {
            let before = goro::stats().syscalls_handed_off;
            let g = goro::enter_syscall_block();
            let mid = goro::stats().syscalls_handed_off;
            goro::exit_syscall(g);
            assert_eq!(mid, before + 1);
            // The goroutine runs on with a P: channels park again.
            let (tx, rx) = goro::chan::<i32>(0);
            goro::spawn(move || tx.send(7).unwrap());
            assert_eq!(rx.recv().unwrap(), 7);
        })
    });
}

/// A goroutine blocked in a restartable read (a pipe) while blocking
/// detection signals its thread: the read completes with the data, never
/// with EINTR, and the other goroutines ran meanwhile.
#[test]
fn detected_read_no_eintr() {
    child("detected_read_no_eintr", &[ONE_P], || {
        goro::run(|| {
            use std::io::{Read, Write};
            let mut fds = [0i32; 2];
            // SAFETY: fds is a valid 2-int array.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: fresh fds we own.
            let mut r = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
            // SAFETY: as above.
            let mut w = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
            let reader = goro::spawn(move || {
                let mut buf = [0u8; 5];
                r.read_exact(&mut buf).map(|_| buf)
            });
            // Runs only once the reader's P was handed on.
            let (tx, rx) = goro::chan::<()>(0);
            goro::spawn(move || tx.send(()).unwrap());
            rx.recv().unwrap();
            // Let detection signal the blocked reader a few times.
            for _ in 0..20 {
                goro::time::sleep(Duration::from_millis(2));
            }
            std::thread::spawn(move || w.write_all(b"hello").unwrap())
                .join()
                .unwrap();
            assert_eq!(&reader.join().unwrap().expect("read failed"), b"hello");
        })
    });
}

/// A goroutine whose time is spent inside libc without blocking — a loop
/// of 1 MiB copies (libc's memmove) or of `std::fs::read` of a small file
/// (short syscalls, on a CPU, which blocking detection does not see as
/// blocked) — gives up its P: its thread is signalled nearly always at a
/// pc in libc, where it cannot be preempted, so a slice after the first
/// refused signal its P is detached as for a blocked call. Another
/// goroutine's sleeps then return, and stop-the-world (`set_max_procs`)
/// completes. Before session 24 both hung at GOMAXPROCS=1 (a helper's
/// file-reading program never finished).
#[test]
fn goroutine_computing_in_libc_gives_up_its_p() {
    child(
        "goroutine_computing_in_libc_gives_up_its_p",
        &[ONE_P],
        || {
            // The failure is a hang: end it with a message.
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_secs(if qemu() { 120 } else { 20 }));
                eprintln!("hung: the goroutine in libc kept the only P");
                std::process::exit(3);
            });
            let path = std::env::temp_dir().join(format!("goro-libc-hog-{}", std::process::id()));
            std::fs::write(&path, vec![7u8; 16 << 10]).unwrap();
            for mode in ["memcpy", "fsread"] {
                let detaches = goro::stats().retakes_detected;
                let path = path.clone();
                goro::run(move || {
                    let stop = Arc::new(AtomicBool::new(false));
                    let hog = goro::spawn({
                        let stop = stop.clone();
                        move || {
                            let src = vec![1u8; 1 << 20];
                            let mut dst = vec![0u8; 1 << 20];
                            let mut n = 0usize;
                            while !stop.load(Relaxed) {
                                if mode == "memcpy" {
                                    dst.copy_from_slice(std::hint::black_box(&src));
                                    n += dst[n % (1 << 20)] as usize;
                                } else {
                                    n += std::fs::read(&path).unwrap().len();
                                }
                                std::hint::black_box(n);
                            }
                        }
                    });
                    // The hog starts running when main first parks. Each
                    // sleep needs the P back: a signal that lands in the
                    // hog's own code preempts it normally instead, but
                    // not 20 times in a row (once detached, it stays so).
                    for _ in 0..20 {
                        goro::time::sleep(Duration::from_millis(1));
                    }
                    assert_eq!(goro::set_max_procs(2), 1);
                    assert_eq!(goro::set_max_procs(1), 2);
                    stop.store(true, Relaxed);
                    hog.join().unwrap();
                });
                assert!(
                    goro::stats().retakes_detected > detaches,
                    "{mode}: the P was not detached"
                );
            }
            let _ = std::fs::remove_file(&path);
        },
    );
}

/// Many goroutines parked in unwrapped blocking reads (a std::net server's
/// idle connections): sysmon's checks of their detached Ms are bounded.
/// Before session 25 every detached M's `/proc/self/task/<tid>/syscall`
/// was read every 200 µs: with 1,000 such goroutines sysmon used 440-680
/// ms of CPU per second, and handing off each newly blocked P took so long
/// that spawning 2,000 readers took up to 59 s at GOMAXPROCS=1 (h14). Now
/// an M found blocked is probed again after a doubling gap (200 µs to 1
/// s), at most 16 per scan: over a window of W the probes stay below
/// N × (log2(W / 200 µs) + 3). The bound grows with the measured window,
/// so a slow machine cannot break it; before, a 300 ms window saw tens of
/// thousands.
#[test]
fn detached_blocked_threads_are_probed_with_backoff() {
    child(
        "detached_blocked_threads_are_probed_with_backoff",
        &[ONE_P],
        || {
            use std::io::{Read, Write};
            use std::os::fd::FromRawFd;
            let n = if qemu() { 50 } else { 200 };
            goro::run(move || {
                let mut writers = Vec::new();
                let mut readers = Vec::new();
                for _ in 0..n {
                    let mut fds = [0; 2];
                    // SAFETY: fds is a valid array of two ints.
                    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
                    // SAFETY: pipe just returned these fds; each File owns one.
                    let (mut r, w) = unsafe {
                        (
                            std::fs::File::from_raw_fd(fds[0]),
                            std::fs::File::from_raw_fd(fds[1]),
                        )
                    };
                    writers.push(w);
                    readers.push(goro::spawn(move || {
                        let mut b = [0u8; 1];
                        r.read(&mut b).unwrap()
                    }));
                }
                // Wait (polling a counter, not timing) until every reader's
                // P has been detached: one detach per reader.
                while goro::stats().retakes_detected < n as u64 {
                    goro::time::sleep(Duration::from_millis(5));
                }
                // A busy P keeps sysmon ticking (an idle process lets it
                // sleep, and the scan with it).
                let stop = Arc::new(AtomicBool::new(false));
                let hog = goro::spawn({
                    let stop = stop.clone();
                    move || {
                        let mut x = 0u64;
                        while !stop.load(Relaxed) {
                            x = std::hint::black_box(x + 1);
                        }
                    }
                });
                let p0 = goro::__private::detached_probes();
                let t0 = Instant::now();
                goro::time::sleep(Duration::from_millis(300));
                let w = t0.elapsed();
                let probes = goro::__private::detached_probes() - p0;
                stop.store(true, Relaxed);
                hog.join().unwrap();
                let per_m = (w.as_nanos() as f64 / 200_000.0).log2() + 3.0;
                let bound = (n as f64 * per_m) as u64;
                assert!(
                    probes <= bound,
                    "{probes} probes of {n} blocked Ms in {w:?} (bound {bound})"
                );
                for mut w in writers {
                    w.write_all(&[1]).unwrap();
                }
                for r in readers {
                    assert_eq!(r.join().unwrap(), 1);
                }
            })
        },
    );
}

// ---------------------------------------------------------------------------
// Signals that are not goro's.

/// SIGURG sent by the user to the process (kill) while goroutines run and
/// hogs are preempted: nothing breaks, and a user handler installed before
/// the runtime started still receives the user's signals.
#[test]
fn user_sigurg() {
    child(
        "user_sigurg",
        &[ONE_P, ("GODEBUG", "gorotimeslice=500")],
        || {
            static USER: AtomicUsize = AtomicUsize::new(0);
            extern "C" fn handler(_: libc::c_int) {
                USER.fetch_add(1, SeqCst);
            }
            // SAFETY: installing a plain handler before the runtime starts.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigaction(libc::SIGURG, &sa, std::ptr::null_mut());
            }
            goro::run(|| {
                let stop = Arc::new(AtomicBool::new(false));
                let hogs: Vec<_> = (0..2)
                    .map(|_| {
                        let stop = stop.clone();
                        goro::spawn(move || spin_until(&stop))
                    })
                    .collect();
                // The hogs get preempted by goro's own SIGURGs meanwhile.
                while goro::stats().preemptions_async < 3 {
                    goro::yield_now();
                }
                let (tx, rx) = goro::chan::<u64>(0);
                let sum = goro::spawn(move || rx.iter().sum::<u64>());
                for i in 0..200u64 {
                    if i % 10 == 0 {
                        // Standard signals coalesce while pending: wait for each
                        // to reach the user's handler before sending the next.
                        let before = USER.load(SeqCst);
                        // SAFETY: signalling our own process.
                        unsafe { libc::kill(libc::getpid(), libc::SIGURG) };
                        let t = Instant::now();
                        while USER.load(SeqCst) == before {
                            assert!(
                                t.elapsed() < Duration::from_secs(20),
                                "user handler not called"
                            );
                            goro::yield_now();
                        }
                    }
                    tx.send(i).unwrap();
                }
                drop(tx);
                assert_eq!(sum.join().unwrap(), 199 * 200 / 2);
                // The sends may all have run before a hog did (runnext
                // ping-pong inherits the time slice): let the hogs run until
                // goro has sent preemption signals of its own, or the test is
                // void. A hang here fails in the child's watchdog.
                while goro::stats().preempt_signals == 0 {
                    goro::yield_now();
                }
                stop.store(true, SeqCst);
                for h in hogs {
                    h.join().unwrap();
                }
                // Exactly the user's signals reached the user's handler (none
                // of goro's many preemption signals did).
                assert_eq!(USER.load(SeqCst), 20);
            })
        },
    );
}

/// Preemption requested while goroutines are deep in libc (memcpy, strlen),
/// in runtime critical sections (channel locks, spawn) and in syscalls:
/// every result stays correct.
#[test]
fn preempt_in_libc_runtime_and_syscalls() {
    child(
        "preempt_in_libc_runtime_and_syscalls",
        &[("GOMAXPROCS", "2"), ("GODEBUG", "gorotimeslice=200")],
        || {
            goro::run(|| {
                let rounds = if qemu() { 50 } else { 2_000 };
                let libc_hog = goro::spawn(move || {
                    let src = vec![7u8; 1 << 20];
                    let mut dst = vec![0u8; 1 << 20];
                    let mut cs = vec![b'x'; 1 << 20];
                    *cs.last_mut().unwrap() = 0;
                    let mut total = 0usize;
                    for _ in 0..rounds {
                        // SAFETY: both buffers are 1 MiB; cs is NUL-terminated.
                        unsafe {
                            libc::memcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), src.len());
                            total += libc::strlen(cs.as_ptr().cast());
                        }
                        assert_eq!(dst[12345], 7);
                    }
                    total
                });
                let (tx, rx) = goro::chan::<u64>(16);
                let chan_hogs: Vec<_> = (0..3)
                    .map(|_| {
                        let tx = tx.clone();
                        goro::spawn(move || {
                            for i in 0..rounds as u64 * 50 {
                                tx.send(i).unwrap();
                                if i % 100 == 0 {
                                    goro::spawn(|| {}).join().unwrap();
                                }
                            }
                        })
                    })
                    .collect();
                drop(tx);
                let sys = goro::spawn(move || {
                    for _ in 0..rounds * 10 {
                        goro::blocking(|| {
                            // SAFETY: getppid has no preconditions.
                            unsafe { libc::getppid() }
                        });
                    }
                });
                let sum: u64 = rx.iter().sum();
                let per = rounds as u64 * 50;
                assert_eq!(sum, 3 * (per * (per - 1) / 2));
                for h in chan_hogs {
                    h.join().unwrap();
                }
                sys.join().unwrap();
                assert_eq!(libc_hog.join().unwrap(), rounds * ((1 << 20) - 1));
                println!("{:?}", goro::stats());
            })
        },
    );
}

// ---------------------------------------------------------------------------
// Faults stay in their goroutine.

/// std keeps "this thread is panicking" in thread-local state. A goroutine
/// that parks while unwinding (a Drop that receives from a channel) must
/// not leave that state to an innocent goroutine on the same M, and must
/// find it again when it resumes: it stays on its M until unwinding ends.
#[test]
fn park_while_unwinding_keeps_panic_state() {
    child("park_while_unwinding_keeps_panic_state", &[ONE_P], || {
        goro::run(|| {
            struct ParkOnDrop {
                parked: goro::Sender<()>,
                wake: goro::Receiver<()>,
                after: Arc<AtomicBool>,
            }
            impl Drop for ParkOnDrop {
                fn drop(&mut self) {
                    self.parked.send(()).unwrap();
                    self.wake.recv().unwrap();
                    self.after.store(std::thread::panicking(), SeqCst);
                }
            }
            let (parked_tx, parked_rx) = goro::chan::<()>(1);
            let (wake_tx, wake_rx) = goro::chan::<()>(0);
            let after = Arc::new(AtomicBool::new(false));
            let unwinder = {
                let after = after.clone();
                goro::spawn(move || {
                    let _d = ParkOnDrop {
                        parked: parked_tx,
                        wake: wake_rx,
                        after,
                    };
                    panic!("boom (expected by the test)");
                })
            };
            let innocent = goro::spawn(move || {
                parked_rx.recv().unwrap();
                let panicking = std::thread::panicking();
                let m = std::sync::Mutex::new(0);
                drop(m.lock().unwrap());
                let poisoned = m.is_poisoned();
                wake_tx.send(()).unwrap();
                (panicking, poisoned)
            });
            let (panicking, poisoned) = innocent.join().unwrap();
            assert!(unwinder.join().is_err());
            assert!(!panicking, "the innocent goroutine saw thread::panicking()");
            assert!(!poisoned, "the innocent goroutine poisoned a std Mutex");
            assert!(
                after.load(SeqCst),
                "the unwinding goroutine lost its panic state"
            );
            // No pin leaks: the count returns to 0. (Since session 29 it
            // counts only async preemption pins, not the unwinder's.) Under
            // qemu it read 1 right after the joins in 3 of 30 runs: a G
            // preempted in its exit path, after join's result (settled_pins).
            assert_eq!(settled_pins().pinned_threads, 0);
        })
    });
}

/// A goroutine that exits with its SyscallGuard forgotten (mem::forget)
/// leaves its syscall implicitly at exit; the runtime goes on.
#[test]
fn forgotten_syscall_guard() {
    child("forgotten_syscall_guard", &[ONE_P], || {
        goro::run(|| {
            for _ in 0..10 {
                goro::spawn(|| std::mem::forget(goro::enter_syscall()))
                    .join()
                    .unwrap();
                goro::spawn(|| std::mem::forget(goro::enter_syscall_block()))
                    .join()
                    .unwrap();
            }
            let (tx, rx) = goro::chan::<u32>(0);
            goro::spawn(move || tx.send(5).unwrap());
            assert_eq!(rx.recv().unwrap(), 5);
        })
    });
}

/// A SyscallGuard that outlives its goroutine in a `thread_local!` (which
/// needs no `Send`) and is dropped by a later goroutine on that thread is
/// inert: its goroutine left the syscall when it exited. Before session 21
/// the drop ran exitsyscall for the wrong goroutine ("fatal error:
/// casgstatus: bad transition Syscall -> Runnable").
#[test]
fn syscall_guard_dropped_by_another_goroutine() {
    child(
        "syscall_guard_dropped_by_another_goroutine",
        &[ONE_P],
        || {
            use std::cell::RefCell;
            thread_local! {
                static STASH: RefCell<Option<goro::SyscallGuard>> = const { RefCell::new(None) };
            }
            goro::run(|| {
                for _ in 0..3 {
                    // enter_syscall keeps the P on this M (until sysmon
                    // retakes it), so the next goroutines soon run on this
                    // thread (or another: they find nothing; retry). If
                    // sysmon retook the P meanwhile, the stashing M ends
                    // idle with its guard and, with one P, is never woken
                    // again (about 1 run in 30 under qemu on a loaded
                    // machine, at 508e8c0 too): stash anew.
                    let mut found = false;
                    for _ in 0..10 {
                        goro::spawn(move || {
                            let g = goro::enter_syscall();
                            STASH.with(|s| *s.borrow_mut() = Some(g));
                        })
                        .join()
                        .unwrap();
                        for _ in 0..100 {
                            found |= goro::spawn(|| {
                                let g = STASH.with(|s| s.borrow_mut().take());
                                let had = g.is_some();
                                drop(g);
                                // Still a schedulable goroutine: it parks.
                                goro::time::sleep(Duration::from_micros(100));
                                had
                            })
                            .join()
                            .unwrap();
                            if found {
                                break;
                            }
                        }
                        if found {
                            break;
                        }
                    }
                    assert!(found, "no goroutine met the stashed guard");
                }
                let (tx, rx) = goro::chan::<u32>(0);
                let h = goro::spawn(move || (0..100).map(|_| rx.recv().unwrap()).sum::<u32>());
                for i in 0..100 {
                    tx.send(i).unwrap();
                }
                assert_eq!(h.join().unwrap(), 4950);
            })
        },
    );
}

/// A std::net echo server written as a new user would — one goroutine per
/// connection, blocking std reads and writes, no `blocking` guard — serves
/// concurrent clients with GOMAXPROCS = 1 (blocking detection hands each
/// blocked thread's P on). Without detection it hangs at the first read.
#[test]
fn std_net_echo_unguarded() {
    child("std_net_echo_unguarded", &[ONE_P], || {
        use std::io::{Read, Write};
        goro::run(|| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            goro::spawn(move || loop {
                let (mut s, _) = l.accept().unwrap();
                goro::spawn(move || {
                    let mut buf = [0u8; 1024];
                    loop {
                        let n = s.read(&mut buf).unwrap();
                        if n == 0 {
                            return;
                        }
                        s.write_all(&buf[..n]).unwrap();
                    }
                });
            });
            let clients = if qemu() { 5 } else { 20 };
            let hs: Vec<_> = (0..clients)
                .map(|i| {
                    goro::spawn(move || {
                        let mut c = std::net::TcpStream::connect(addr).unwrap();
                        for j in 0..20u32 {
                            let msg = format!("{i}-{j}");
                            c.write_all(msg.as_bytes()).unwrap();
                            let mut b = vec![0u8; msg.len()];
                            c.read_exact(&mut b).unwrap();
                            assert_eq!(b, msg.as_bytes());
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert!(goro::stats().retakes_detected > 0);
        })
    });
}

/// Context switches of every thread of this process (voluntary and not).
fn ctx_switches() -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for l in s.lines() {
            if l.starts_with("voluntary_ctxt_switches")
                || l.starts_with("nonvoluntary_ctxt_switches")
            {
                n += l
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    n
}

/// An idle runtime sleeps: with 100 goroutines parked and nothing to do,
/// sysmon stops ticking (Go's sysmonwait) and idle Ms park without
/// periodic wake-ups. The bound is generous (Go measures 3–9 switches/s;
/// goro's sysmon alone used to make 100).
#[test]
fn idle_runtime_sleeps() {
    child("idle_runtime_sleeps", &[("GOMAXPROCS", "2")], || {
        if qemu() {
            // qemu-user's own threads and timers dominate the count.
            return;
        }
        let (tx, rx) = goro::chan::<()>(0);
        let hs: Vec<_> = (0..100)
            .map(|_| {
                let rx = rx.clone();
                goro::spawn(move || {
                    let _ = rx.recv();
                })
            })
            .collect();
        // Every goroutine parked: on a loaded machine the burst may still
        // be running after the settling time below.
        for h in &hs {
            common::wait_parked(h.id());
        }
        // Let the spawn burst settle (spinning Ms give up, sysmon backs off).
        std::thread::sleep(Duration::from_millis(300));
        // The fewest switches in up to 3 windows of 1 s: a runtime that
        // wakes periodically while idle switches as often in each, while a
        // stall of a loaded machine may spill the settling into the first.
        let mut per_s = Vec::new();
        while per_s.len() < 3 && per_s.iter().all(|&n| n >= 30) {
            let before = ctx_switches();
            std::thread::sleep(Duration::from_secs(1));
            per_s.push(ctx_switches() - before);
        }
        drop(tx);
        for h in hs {
            h.join().unwrap();
        }
        println!("context switches in 1 s of idleness: {per_s:?}");
        assert!(
            per_s.iter().any(|&n| n < 30),
            "{per_s:?} context switches in seconds of idleness"
        );
    });
}

/// The sysmon thread's /proc/self/task directory (found by its name).
fn sysmon_task() -> std::path::PathBuf {
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "goro-sysmon" {
            return t.path();
        }
    }
    panic!("no goro-sysmon thread in /proc/self/task");
}

/// Voluntary context switches of the sysmon thread.
fn sysmon_switches() -> u64 {
    let s = std::fs::read_to_string(sysmon_task().join("status")).unwrap_or_default();
    for l in s.lines() {
        if let Some(v) = l.strip_prefix("voluntary_ctxt_switches:") {
            return v.trim().parse().unwrap_or(0);
        }
    }
    panic!("no voluntary_ctxt_switches in sysmon's status");
}

/// `std::process::exit` called from a goroutine while others wait for the
/// P: std's exit switches off the calling thread's alternate signal stack
/// before running atexit handlers, and a preemption signal landing in a
/// slow handler must then be ignored, not served from the goroutine's
/// stack (h15: SIGSEGV in every run before). The exit code must be 7.
#[test]
fn exit_from_goroutine_with_slow_atexit_handler() {
    const NAME: &str = "exit_from_goroutine_with_slow_atexit_handler";
    extern "C" fn slow_atexit() {
        // Computes for 200 ms in Rust code (a place the handler would
        // preempt): sysmon asks every 10 ms while the spinners wait.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(200) {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
        }
        std::hint::black_box(x);
    }
    if std::env::var(CHILD_ENV).as_deref() == Ok(NAME) {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::atexit(slow_atexit) };
        goro::run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            for _ in 0..4 {
                let stop = stop.clone();
                goro::go!(move || spin_until(&stop));
            }
            let h = goro::go!(|| std::process::exit(7));
            let _ = h.join();
        });
        unreachable!("process::exit returned");
    }
    let out = spawn_child(NAME, &[ONE_P]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{NAME}: {:?}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program that blocks every signal before the runtime starts (a daemon
/// that `sigwait`s in one thread): goro's threads inherit the mask and
/// must unblock SIGURG themselves (Go's minitSignalMask), or a CPU loop
/// is never preempted (h17: hung 5 of 5 runs).
#[test]
fn preemption_with_signals_blocked_at_start() {
    child("preemption_with_signals_blocked_at_start", &[ONE_P], || {
        block_all_signals();
        goro::run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let s2 = stop.clone();
            let h = goro::go!(move || spin_until(&s2));
            // At GOMAXPROCS=1 this goroutine runs again only once the
            // spinner has been preempted.
            goro::yield_now();
            stop.store(true, Relaxed);
            h.join().unwrap();
        });
    });
}

/// A pipe as (read end, write end) Files: a read on it is a blocking
/// call goro does not know about (unguarded).
fn pipe_files() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) just returned these descriptors, each owned by one
    // File from here on.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// Switches off the calling thread's alternate signal stack, as std's
/// `process::exit` does (and libraries with signal stacks of their own
/// may).
fn disable_signal_stack() {
    let off = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: libc::SS_DISABLE,
        ss_size: 0,
    };
    // SAFETY: only changes this thread's signal stack setting; goro's
    // mapping stays owned by its M, and nothing runs on it now.
    assert_eq!(unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) }, 0);
}

/// Blocks every signal on the calling thread (threads it creates inherit
/// the mask).
fn block_all_signals() {
    // SAFETY: sigset_t is plain data, filled by sigfillset; the call only
    // changes this thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut()),
            0
        );
    }
}

/// A goroutine computing on a thread whose alternate signal stack is
/// switched off cannot be preempted there (the frame copy needs goro's
/// signal stack); it is detached instead, as a loop in foreign code is,
/// and the other goroutine gets the P (h17: hung 3 of 3 runs).
#[test]
fn spinning_thread_without_signal_stack_is_detached() {
    child(
        "spinning_thread_without_signal_stack_is_detached",
        &[ONE_P],
        || {
            goro::run(|| {
                let stop = Arc::new(AtomicBool::new(false));
                let s2 = stop.clone();
                let h = goro::go!(move || {
                    disable_signal_stack();
                    spin_until(&s2)
                });
                // At GOMAXPROCS=1 this goroutine runs again only once the
                // spinner has given up its P.
                goro::yield_now();
                stop.store(true, Relaxed);
                h.join().unwrap();
            });
        },
    );
}

/// A goroutine that switched its thread's alternate signal stack off (as
/// std's `process::exit` does, or a library with signal stacks of its
/// own) and then blocks in an unguarded read: its P must still be handed
/// off. Asynchronous preemption is refused on such a thread (the frame
/// copy needs goro's signal stack), detaching is not (h17: refused for
/// good before, and the other goroutine here never ran again).
#[test]
fn blocked_thread_without_signal_stack_is_detached() {
    child(
        "blocked_thread_without_signal_stack_is_detached",
        &[ONE_P],
        || {
            goro::run(|| {
                let (mut r, mut w) = pipe_files();
                let reader = goro::go!(move || {
                    disable_signal_stack();
                    let mut b = [0u8; 1];
                    // Unguarded: holds the P until detected.
                    std::io::Read::read(&mut r, &mut b).unwrap();
                    b[0]
                });
                // Runs only once the reader's P has been handed off.
                goro::time::sleep(Duration::from_millis(1));
                std::io::Write::write_all(&mut w, &[42]).unwrap();
                assert_eq!(reader.join().unwrap(), 42);
            });
        },
    );
}

/// Running out of descriptors for a moment does not turn blocking
/// detection off for good: sysmon's /proc probe fails with EMFILE while
/// the table is full, and detection is back once it is not (h17: one
/// EMFILE disabled it for the rest of the process).
#[test]
fn detection_survives_a_full_fd_table() {
    child("detection_survives_a_full_fd_table", &[ONE_P], || {
        goro::run(|| {
            let (mut r, mut w) = pipe_files();
            // Fill the table (the soft limit lowered so this is quick).
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: lim is a valid rlimit for getrlimit to fill and
            // setrlimit to read.
            unsafe {
                assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
                lim.rlim_cur = lim.rlim_cur.min(256);
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            }
            let mut hog = Vec::new();
            while let Ok(f) = std::fs::File::open("/dev/null") {
                hog.push(f);
            }
            let reader = goro::go!(move || {
                let mut b = [0u8; 1];
                // Unguarded: its P must be detected and handed off.
                std::io::Read::read(&mut r, &mut b).unwrap();
                b[0]
            });
            // Runs once the reader's P is handed off, by detection (whose
            // probes fail with EMFILE now) or its slower fallback.
            goro::time::sleep(Duration::from_millis(1));
            drop(hog);
            std::io::Write::write_all(&mut w, &[7]).unwrap();
            assert_eq!(reader.join().unwrap(), 7);
            assert!(
                !goro::stats().detect_unavailable,
                "blocking detection was switched off by a passing EMFILE"
            );
        });
    });
}

/// sysmon sleeps with a 1 µs timer slack (not Linux's 50 µs), so that its
/// 20 µs ticks, which every hand-off of a blocked P waits for, last about
/// 20 µs (docs/PREEMPTION.md).
#[test]
fn sysmon_timer_slack_is_1us() {
    child("sysmon_timer_slack_is_1us", &[ONE_P], || {
        goro::run(|| {
            // Per thread only under /proc/<tid>, not /proc/self/task.
            let tid = sysmon_task().file_name().unwrap().to_owned();
            let path = std::path::Path::new("/proc")
                .join(tid)
                .join("timerslack_ns");
            // sysmon sets it first thing, but the thread is named (and so
            // found) as soon as it exists: under load it was read before,
            // as Linux's 50000 (CI, x86_64). Wait for the value; a thread
            // that never sets it fails after the bound (a hang detector,
            // not a speed check).
            let t0 = Instant::now();
            let mut slack = std::fs::read_to_string(&path).unwrap();
            while slack.trim() != "1000" && t0.elapsed() < Duration::from_secs(10) {
                goro::yield_now();
                slack = std::fs::read_to_string(&path).unwrap();
            }
            assert_eq!(slack.trim(), "1000", "sysmon's timer slack (ns)");
        });
    });
}

/// sysmon backs off to Go's 10 ms while Ps are merely busy: a goroutine
/// that keeps switching (so nothing is due for preemption), then one that
/// keeps going idle for 100 µs at a time (every P idle, then busy again).
/// Each window of a phase runs 500 ms; 10 ms ticks make ~50 sysmon
/// wake-ups in it.
/// With the old 1 ms cap while busy, sysmon woke ~500 times in the first
/// phase, and in the second it was woken out of its all-idle wait on
/// nearly every idle-to-busy turn. A few hundred switches a second of a
/// thread that displaces a server's M cost it 5–8% of its requests under
/// load (docs/BENCHMARKS.md, session 18).
#[test]
fn sysmon_backs_off_while_busy() {
    child(
        "sysmon_backs_off_while_busy",
        &[("GOMAXPROCS", "2")],
        || {
            if qemu() {
                // qemu-user's timers make the count meaningless.
                return;
            }
            goro::run(|| {
                let window = |f: &dyn Fn()| {
                    let before = sysmon_switches();
                    let end = Instant::now() + Duration::from_millis(500);
                    while Instant::now() < end {
                        f();
                    }
                    sysmon_switches() - before
                };
                // The fewest wake-ups of up to 5 windows of 500 ms. On a
                // loaded machine the kernel may deschedule the thread
                // running the loop for 10 ms or more: sysmon then sees
                // a G that ran a whole slice, preempts it, and rightly
                // ticks every 1 ms for the next 100 ms (ATTENTIVE_NS);
                // two such stalls in one window made 209 wake-ups
                // (`taskset -c 0` beside 3 CPU hogs, 1 run in 20). A
                // sysmon that does not back off wakes ~500 times in
                // every window, so the minimum still catches it.
                let phase = |f: &dyn Fn()| {
                    // Let sysmon settle into the phase's rhythm first.
                    let settle = Instant::now() + Duration::from_millis(100);
                    while Instant::now() < settle {
                        f();
                    }
                    let mut counts = Vec::new();
                    while counts.len() < 5 && counts.iter().all(|&n| n >= 150) {
                        counts.push(window(f));
                    }
                    counts
                };
                let busy = phase(&|| goro::yield_now());
                let bouncing = phase(&|| goro::time::sleep(Duration::from_micros(100)));
                println!("sysmon switches in 500 ms: busy {busy:?}, bouncing {bouncing:?}");
                assert!(
                    busy.iter().any(|&n| n < 150),
                    "sysmon woke {busy:?} times in windows of 500 ms of a busy P"
                );
                assert!(
                    bouncing.iter().any(|&n| n < 150),
                    "sysmon woke {bouncing:?} times in windows of 500 ms of a P going idle and busy"
                );
            });
        },
    );
}

/// Go's gopreempt_m: a goroutine preempted at a runtime entry goes to the
/// global run queue, behind the work already waiting there (Go's
/// goschedImpl), not to its P's local tail as `yield_now` does. On one P
/// with async preemption off, a hog loops on a runtime entry (`try_recv`)
/// while a plain thread queues K goroutines globally; sysmon preempts the
/// hog at 10 ms, and when the hog next runs every goroutine queued before
/// that preemption must have run. With the local tail the hog resumed
/// first, and saw at most the one that the 1-in-61 global check let in.
///
/// Checked at each of the hog's preemptions, against the goroutines
/// queued before it: the spawner thread may be descheduled between its
/// spawns on a loaded machine, and a preemption then puts the hog between
/// them in the queue. The former check (the K all run when the hog first
/// ran again after seeing them queued) then failed, seeing only those
/// queued before the stall (a 25 ms sleep after the third spawn: 8 runs
/// of 8 failed; this check passed 12 of 12).
#[test]
fn preempted_goroutine_waits_behind_global_queue() {
    child(
        "preempted_goroutine_waits_behind_global_queue",
        &[("GOMAXPROCS", "1"), ("GODEBUG", "asyncpreemptoff=1")],
        || {
            const K: usize = 8;
            goro::run(|| {
                let ran = Arc::new(AtomicUsize::new(0));
                let hog_running = Arc::new(AtomicBool::new(false));
                // Goroutines in the global queue (counted once spawned).
                let queued = Arc::new(AtomicUsize::new(0));
                let (_tx, rx) = goro::chan::<()>(1);
                let hog = goro::spawn({
                    let (ran, hog_running, queued) =
                        (ran.clone(), hog_running.clone(), queued.clone());
                    move || {
                        hog_running.store(true, SeqCst);
                        let deadline = Instant::now() + Duration::from_secs(30);
                        let mut last_ran = 0;
                        loop {
                            let before = queued.load(SeqCst);
                            // Each try_recv is a runtime entry where a
                            // preemption request is honoured.
                            let _ = rx.try_recv();
                            // Others run only while the hog is off the only
                            // P (main is parked in join): a change means it
                            // was preempted at that try_recv, with `before`
                            // goroutines queued ahead of it.
                            let now = ran.load(SeqCst);
                            if now != last_ran {
                                if now < before {
                                    return Err((now, before));
                                }
                                last_ran = now;
                            }
                            if now == K {
                                return Ok(());
                            }
                            assert!(Instant::now() < deadline, "hog never preempted");
                        }
                    }
                });
                let spawner = std::thread::spawn({
                    let ran = ran.clone();
                    move || {
                        while !hog_running.load(SeqCst) {
                            std::thread::yield_now();
                        }
                        // From a plain thread: onto the global queue.
                        for _ in 0..K {
                            let ran = ran.clone();
                            drop(goro::spawn(move || {
                                ran.fetch_add(1, SeqCst);
                            }));
                            queued.fetch_add(1, SeqCst);
                        }
                    }
                });
                let r = hog.join().unwrap();
                spawner.join().unwrap();
                if let Err((ran, queued)) = r {
                    panic!(
                        "the preempted hog ran before the global queue: \
                         {ran} of the {queued} goroutines queued before it had run"
                    );
                }
            });
        },
    );
}

/// The calling OS thread's kernel id.
fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

/// Goroutines that unwind a panic through code that moves them off their
/// P — a `goro::blocking` call the P is handed off during (and found busy
/// after), or an asynchronous preemption in migrate mode — resume on their
/// own thread: std's panic count is thread-local, so elsewhere the
/// unwinding goroutine would lose it and an innocent goroutine on the old
/// thread would see `panicking()`. Both moved until session 21 (about half
/// the unwinding goroutines; thousands of sightings).
fn unwind_off_p(slow_drop: fn()) {
    static STOP: AtomicBool = AtomicBool::new(false);
    static MOVED: AtomicU64 = AtomicU64::new(0);
    static SAW: AtomicU64 = AtomicU64::new(0);
    struct D(fn());
    impl Drop for D {
        fn drop(&mut self) {
            // The panic began locked (below); from here on, only the
            // runtime's pinning of an unwinding goroutine keeps it here.
            goro::unlock_os_thread();
            let before = tid();
            (self.0)();
            if tid() != before {
                MOVED.fetch_add(1, Relaxed);
            }
        }
    }
    goro::run(move || {
        // Innocent goroutines keep both Ps busy and watch for a panic
        // count left behind on their thread.
        let watchers: Vec<_> = (0..4)
            .map(|_| {
                goro::spawn(|| {
                    while !STOP.load(Relaxed) {
                        if std::thread::panicking() {
                            SAW.fetch_add(1, Relaxed);
                        }
                        let mut x = 0u64;
                        for _ in 0..20_000 {
                            x = std::hint::black_box(x.wrapping_add(1));
                        }
                        goro::yield_now();
                    }
                })
            })
            .collect();
        for _ in 0..if qemu() { 4 } else { 10 } {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    goro::spawn(move || {
                        // Locked while std starts the panic: in migrate
                        // mode a preemption inside std's update of its
                        // thread-local panic count (before panicking() is
                        // true) would move the goroutine with the old
                        // thread's slot in a register, the documented
                        // migrate-mode hazard for any thread-local
                        // (PREEMPTION.md), not what this test is about.
                        goro::lock_os_thread();
                        let _d = D(slow_drop);
                        panic!("unwinding through a slow destructor (expected)");
                    })
                })
                .collect();
            for h in hs {
                assert!(h.join().is_err());
            }
        }
        STOP.store(true, Relaxed);
        for w in watchers {
            w.join().unwrap();
        }
        assert_eq!(
            MOVED.load(Relaxed),
            0,
            "an unwinding goroutine changed thread"
        );
        assert_eq!(SAW.load(Relaxed), 0, "a panic count was left on a thread");
    });
}

#[test]
fn unwinding_through_blocking_stays_on_its_thread() {
    child(
        "unwinding_through_blocking_stays_on_its_thread",
        &[("GOMAXPROCS", "2")],
        || unwind_off_p(|| goro::blocking(|| std::thread::sleep(Duration::from_millis(3)))),
    );
}

#[test]
fn unwinding_preempted_in_migrate_mode_stays_on_its_thread() {
    child(
        "unwinding_preempted_in_migrate_mode_stays_on_its_thread",
        &[
            ("GOMAXPROCS", "2"),
            ("GODEBUG", "goropreempt=migrate,gorotimeslice=500"),
        ],
        || {
            unwind_off_p(|| {
                // Computes for 30 ms: preempted every 0.5 ms.
                let t = Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_millis(30) {
                    for _ in 0..1000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
            })
        },
    );
}

/// Out-of-range GODEBUG values are ignored like unparsable ones (as Go
/// ignores a bad GOMAXPROCS): the runtime starts implicitly with the
/// defaults. They made every program abort at start before session 21
/// ("fatal error: goro: invalid config").
#[test]
fn out_of_range_godebug_values_are_ignored() {
    child(
        "out_of_range_godebug_values_are_ignored",
        &[
            ("GOMAXPROCS", "0"),
            (
                "GODEBUG",
                "gorotimeslice=50,goropinnedmax=0,gorotimeslice=abc",
            ),
        ],
        || {
            assert_eq!(goro::run(|| 7), 7);
            assert!(goro::max_procs() >= 1);
        },
    );
}

goro::goroutine_local! {
    static WHO: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Migrate mode preempts goroutines inside goro's own code (inlined into
/// theirs), which Go never does: a goroutine stopped between reading its
/// thread's M and using it must not resume elsewhere with the stale M.
/// Four goroutines on two Ps, 100 µs slices, loop on channel operations
/// (the channel lock's critical section) and goroutine-locals (getg)
/// until the runtime has preempted them asynchronously many times; each
/// checks after every operation that its M's critical-section count is 0
/// and that its goroutine-local is its own. Before session 22 the counts
/// went to -20 and +1 on different Ms (every later preemption refused: a
/// hang) and goroutine-locals read other goroutines' values.
#[test]
fn migrating_preemption_inside_the_runtime_is_sound() {
    child(
        "migrating_preemption_inside_the_runtime_is_sound",
        &[
            ("GOMAXPROCS", "2"),
            (
                "GODEBUG",
                "goropreempt=migrate,gorotimeslice=100,goroasynconly=1",
            ),
        ],
        || {
            goro::run(|| {
                let want = if qemu() { 300 } else { 3000 };
                let target = goro::stats().preemptions_async + want;
                let bad_locks = Arc::new(AtomicUsize::new(0));
                let bad_local = Arc::new(AtomicUsize::new(0));
                let hs: Vec<_> = (1..=4u64)
                    .map(|id| {
                        let (bad_locks, bad_local) = (bad_locks.clone(), bad_local.clone());
                        goro::spawn(move || {
                            WHO.with(|w| w.set(id));
                            let (tx, rx) = goro::chan::<u64>(1);
                            while goro::stats().preemptions_async < target {
                                for i in 0..1000 {
                                    let _ = tx.try_send(i);
                                    let _ = rx.try_recv();
                                    if goro::__private::m_locks() != 0 {
                                        bad_locks.fetch_add(1, Relaxed);
                                    }
                                    if WHO.with(|w| w.get()) != id {
                                        bad_local.fetch_add(1, Relaxed);
                                    }
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                assert_eq!(bad_locks.load(Relaxed), 0, "user code saw m.locks != 0");
                assert_eq!(
                    bad_local.load(Relaxed),
                    0,
                    "goroutine_local read another goroutine's value"
                );
            })
        },
    );
}

/// errno is thread-local memory that rt_sigreturn does not restore: a
/// goroutine preempted asynchronously between a failing libc call and its
/// read of errno must still read its own errno, on whichever thread it
/// resumes. Migrate mode, two Ps: four goroutines fail `close(-1)`
/// (EBADF) and check errno after a compute window, two others keep
/// failing `access` on a missing path (ENOENT, set inside libc) on
/// whatever thread runs them, until 1,000 asynchronous preemptions.
/// Before session 22, 494 checks per 2,001 preemptions read ENOENT
/// (goro::net returned "No such file or directory" for a timeout); with
/// errno saved but LLVM merging the two `__errno_location` calls of
/// async_preempt, 27–45; now 0 in 3 runs. One window stays, as for any
/// thread-local in migrate mode: a preemption in the one instruction
/// between `__errno_location`'s return and the load through it reads the
/// old thread's slot, hence a tolerance of 1% (docs/PREEMPTION.md).
#[test]
fn errno_survives_asynchronous_preemption() {
    child(
        "errno_survives_asynchronous_preemption",
        &[
            ("GOMAXPROCS", "2"),
            ("GODEBUG", "goropreempt=migrate,gorotimeslice=100"),
        ],
        || {
            goro::run(|| {
                let want = if qemu() { 300 } else { 1000 };
                let start = goro::stats().preemptions_async;
                let target = start + want;
                let bad = Arc::new(AtomicUsize::new(0));
                let done = Arc::new(AtomicBool::new(false));
                let polluters: Vec<_> = (0..2)
                    .map(|_| {
                        let done = done.clone();
                        goro::spawn(move || {
                            while !done.load(Relaxed) {
                                // SAFETY: a NUL-terminated path; access only fails.
                                let r = unsafe { libc::access(c"/nonexistent/goro".as_ptr(), 0) };
                                assert_eq!(r, -1);
                            }
                        })
                    })
                    .collect();
                let checkers: Vec<_> = (0..4)
                    .map(|_| {
                        let bad = bad.clone();
                        goro::spawn(move || {
                            while goro::stats().preemptions_async < target {
                                for _ in 0..100 {
                                    // SAFETY: closing an invalid fd only fails.
                                    assert_eq!(unsafe { libc::close(-1) }, -1);
                                    let mut x = 0u64;
                                    for i in 0..2_000u64 {
                                        x = std::hint::black_box(x.wrapping_add(i));
                                    }
                                    // SAFETY: reads this thread's errno.
                                    if unsafe { *libc::__errno_location() } != libc::EBADF {
                                        bad.fetch_add(1, Relaxed);
                                    }
                                }
                            }
                        })
                    })
                    .collect();
                for h in checkers {
                    h.join().unwrap();
                }
                done.store(true, Relaxed);
                for h in polluters {
                    h.join().unwrap();
                }
                let n = goro::stats().preemptions_async - start;
                let bad = bad.load(Relaxed) as u64;
                assert!(
                    bad * 100 <= n,
                    "{bad} errno reads changed under {n} asynchronous preemptions"
                );
            })
        },
    );
}

/// A goroutine whose unwrapped blocking call was detached (blocking
/// detection) takes a P back at its next runtime entry, which may be one
/// that never parks and is no documented switch point (here
/// `WaitGroup::done` with a waiter: a semaphore release). It must go on
/// on its own thread there, in both modes, as a detached G that the
/// handler stops does: it may hold a thread-local borrow, a `tracing`
/// span or std's stdout lock across the call. Before (h44) it was queued
/// for any M when its P was busy: 10 of 10 goroutines resumed on the
/// thread that ran the yielding loop.
#[test]
fn detached_goroutine_keeps_its_thread() {
    detached_goroutine_keeps_its_thread_in("detached_goroutine_keeps_its_thread", "pinned");
}

/// The same in migrating mode (which pins detached goroutines too).
#[test]
fn detached_goroutine_keeps_its_thread_migrate() {
    detached_goroutine_keeps_its_thread_in(
        "detached_goroutine_keeps_its_thread_migrate",
        "migrate",
    );
}

fn detached_goroutine_keeps_its_thread_in(name: &str, mode: &str) {
    let godebug = format!("goropreempt={mode}");
    child(name, &[ONE_P, ("GODEBUG", &godebug)], || {
        goro::run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            // Work that waits for the P (so sysmon detaches the sleeper's)
            // and yields often (so the M running it takes the sleeper from
            // the global queue, rather than the sleeper's own M).
            let yielder = {
                let stop = stop.clone();
                goro::spawn(move || {
                    while !stop.load(Relaxed) {
                        for i in 0..1_000u64 {
                            std::hint::black_box(i);
                        }
                        goro::yield_now();
                    }
                })
            };
            let mut moved = 0;
            let detaches = goro::stats().retakes_detected;
            let rounds = 10;
            for _ in 0..rounds {
                let wg = goro::sync::WaitGroup::new();
                wg.add(1);
                let done = wg.clone();
                let h = goro::spawn(move || {
                    let before = tid();
                    // Unwrapped: detected and detached while it sleeps.
                    std::thread::sleep(Duration::from_millis(30));
                    // The waiter is parked: a release that readies it.
                    done.done();
                    (before, tid())
                });
                wg.wait();
                let (before, after) = h.join().unwrap();
                if before != after {
                    moved += 1;
                }
            }
            stop.store(true, Relaxed);
            yielder.join().unwrap();
            let st = goro::stats();
            assert!(st.retakes_detected > detaches, "never detached: {st:?}");
            assert_eq!(
                moved, 0,
                "{moved} of {rounds} goroutines changed thread at WaitGroup::done: {st:?}"
            );
        })
    });
}

/// Set by `slow_usr1_handler` while it runs.
static IN_USR1_HANDLER: AtomicBool = AtomicBool::new(false);
/// Set by the goroutine that must not run while the handler is stopped.
static OTHER_RAN: AtomicBool = AtomicBool::new(false);
/// Pinned preemptions seen by that goroutine while the handler ran.
static PINNED_SEEN: AtomicUsize = AtomicUsize::new(0);
/// That goroutine ran while the handler was running.
static RAN_DURING_HANDLER: AtomicBool = AtomicBool::new(false);

/// A user's signal handler installed without SA_ONSTACK, so it runs on
/// the interrupted goroutine's stack, and slow (a profiler walking a deep
/// stack): it spins until another goroutine has run, or 10 s (the
/// hand-off takes a few sysmon ticks, ~10-50 ms; the bound only ends a
/// failing run, and is wide for a slow machine under qemu).
extern "C" fn slow_usr1_handler(_: libc::c_int) {
    IN_USR1_HANDLER.store(true, SeqCst);
    let t = Instant::now();
    while !OTHER_RAN.load(SeqCst) && t.elapsed() < Duration::from_secs(10) {
        std::hint::spin_loop();
    }
    IN_USR1_HANDLER.store(false, SeqCst);
}

/// A goroutine is never stopped by asynchronous preemption inside a
/// signal handler that runs on its stack: the handler may have
/// interrupted anything (malloc holding its arena lock, stdio), which the
/// pc check, seeing the handler's own code, cannot tell. Go never stops a
/// goroutine there (its handlers run on the signal stack; a non-Go
/// handler's pc is not Go code). Such a point is treated as foreign code:
/// refused, and the P detached once sysmon escalates, so other goroutines
/// still run while the handler does. Detected by the interrupted
/// context's signal mask, which blocks the handler's signal.
/// Before (h44) the goroutine was preempted inside the handler (pinned:
/// its M asleep mid-handler) for the other goroutine to run.
#[test]
fn no_async_preemption_inside_a_signal_handler() {
    child(
        "no_async_preemption_inside_a_signal_handler",
        &[ONE_P],
        || {
            // SAFETY: installing a handler for SIGUSR1, which nothing else
            // in this child uses; the handler touches atomics only.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = slow_usr1_handler as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
            }
            goro::run(|| {
                let raiser = goro::spawn(|| {
                    // Queued behind us on the only P: runs only once we (in
                    // the handler) lose it.
                    let other = goro::spawn(|| {
                        if IN_USR1_HANDLER.load(SeqCst) {
                            RAN_DURING_HANDLER.store(true, SeqCst);
                            PINNED_SEEN.store(goro::stats().pinned_threads, SeqCst);
                        }
                        OTHER_RAN.store(true, SeqCst);
                    });
                    // SAFETY: raising SIGUSR1 on this thread; its handler is
                    // installed above.
                    unsafe { libc::raise(libc::SIGUSR1) };
                    other
                });
                raiser.join().unwrap().join().unwrap();
                let st = goro::stats();
                // The P was handed on while the handler ran (not after it
                // gave up waiting).
                assert!(RAN_DURING_HANDLER.load(SeqCst), "{st:?}");
                assert_eq!(
                    PINNED_SEEN.load(SeqCst),
                    0,
                    "the goroutine was stopped inside its signal handler: {st:?}"
                );
            })
        },
    );
}
