//! Ports of proc_test.go's LockOSThread cases: a locked goroutine runs
//! only on its thread, its thread runs nothing else, and exiting while
//! locked retires the thread, which then exits (TestLockOSThreadExit,
//! TestLockOSThreadTemplateThreadRace); new threads are created from the
//! template thread, not from a locked one; fork from a goroutine works for a
//! child that only exits or execs.

mod common;
use common::qemu;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the tests one at a time (thread counts are per process); a failed
/// test does not fail the others through a poisoned lock.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling OS thread's kernel id.
fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

/// TestLockOSThread-like: a locked goroutine that parks and is readied many
/// times (channel ping-pong, sleeps, yields) always resumes on its thread,
/// while other goroutines keep running.
#[test]
fn locked_goroutine_stays_on_its_thread() {
    let _w = common::watchdog();
    let _s = serial();
    let rounds = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let (ping_tx, ping_rx) = goro::chan::<u32>(0);
        let (pong_tx, pong_rx) = goro::chan::<u32>(0);
        let partner = goro::go!(move || {
            for v in ping_rx.iter() {
                pong_tx.send(v + 1).unwrap();
            }
        });
        let locked = goro::go!(move || {
            goro::lock_os_thread();
            let me = tid();
            let mut moved = 0;
            for i in 0..rounds {
                ping_tx.send(i).unwrap();
                assert_eq!(pong_rx.recv().unwrap(), i + 1);
                if i % 100 == 0 {
                    goro::yield_now();
                    goro::time::sleep(std::time::Duration::from_micros(10));
                }
                if tid() != me {
                    moved += 1;
                }
            }
            goro::unlock_os_thread();
            moved
        });
        assert_eq!(
            locked.join().unwrap(),
            0,
            "a locked goroutine resumed on another thread"
        );
        partner.join().unwrap();
    });
}

/// While a goroutine is locked, its thread runs no other goroutine.
#[test]
fn locked_thread_runs_nothing_else() {
    let _w = common::watchdog();
    let _s = serial();
    let n = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let (tid_tx, tid_rx) = goro::chan::<i64>(1);
        let (release_tx, release_rx) = goro::chan::<()>(0);
        let locked = goro::go!(move || {
            goro::lock_os_thread();
            tid_tx.send(tid()).unwrap();
            // Park until released: the M must not run others meanwhile.
            release_rx.recv().unwrap();
            goro::unlock_os_thread();
        });
        let locked_tid = tid_rx.recv().unwrap();
        let seen: Vec<i64> = (0..n)
            .map(|_| {
                goro::go!(|| {
                    goro::yield_now();
                    tid()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        release_tx.send(()).unwrap();
        locked.join().unwrap();
        assert!(
            !seen.contains(&locked_tid),
            "another goroutine ran on the locked thread"
        );
    });
}

/// Lock/unlock nest: the goroutine stays wired until the outermost unlock;
/// extra unlocks are no-ops.
#[test]
fn nesting_and_extra_unlock() {
    let _w = common::watchdog();
    let _s = serial();
    goro::run(|| {
        goro::unlock_os_thread(); // no-op when not locked
        goro::lock_os_thread();
        goro::lock_os_thread();
        let me = tid();
        goro::unlock_os_thread();
        for _ in 0..50 {
            goro::time::sleep(std::time::Duration::from_micros(50));
            assert_eq!(tid(), me, "still locked after one of two unlocks");
        }
        goro::unlock_os_thread();
        goro::unlock_os_thread();
    });
}

/// Exiting while locked retires the thread: no goroutine runs on it later,
/// and the scheduler keeps working (TestLockOSThreadExit-like).
#[test]
fn exit_while_locked_retires_thread() {
    let _w = common::watchdog();
    let _s = serial();
    let n = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let dead_tid = goro::go!(|| {
            goro::lock_os_thread();
            tid()
        })
        .join()
        .unwrap();
        let tids: HashSet<i64> = (0..n)
            .map(|_| {
                goro::go!(|| {
                    goro::yield_now();
                    tid()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert!(
            !tids.contains(&dead_tid),
            "a retired thread ran a goroutine"
        );
    });
}

/// Outside a goroutine the calls are no-ops.
#[test]
fn no_op_on_plain_thread() {
    let _w = common::watchdog();
    goro::lock_os_thread();
    goro::unlock_os_thread();
    goro::unlock_os_thread();
}

/// Kernel tasks (threads) of this process: entries of /proc/self/task.
fn task_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .count()
}

/// Waits (bounded) until `cond` holds; panics with `what()` if it does not
/// within `limit`. Polls: thread exit is only observable through /proc.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Go's mexit: 5,000 goroutines (500 under qemu) that exit while locked
/// each take their thread with them; the thread count (kernel tasks and
/// `stats().threads`) returns to within a few of where it started instead
/// of growing by one per goroutine.
#[test]
fn exit_while_locked_ends_the_thread() {
    let _w = common::watchdog();
    let _s = serial();
    let n = if qemu() { 500 } else { 5000 };
    goro::run(|| ());
    let tasks_before = task_count();
    let ms_before = goro::stats().threads;
    goro::run(move || {
        // In waves, so the Ms that replace exiting ones are reused too.
        for _ in 0..10 {
            let hs: Vec<_> = (0..n / 10)
                .map(|_| goro::go!(goro::lock_os_thread))
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        }
    });
    // Idle Ms may legitimately be added (one per P, plus spinners); the
    // test harness starts and ends its own threads around us.
    let slack = goro::max_procs() + 4;
    wait_until(
        Duration::from_secs(60),
        || task_count() <= tasks_before + slack && goro::stats().threads <= ms_before + slack,
        || {
            format!(
                "after {n} lock-and-exit goroutines: {} tasks (was {tasks_before}), \
                 {} Ms (was {ms_before})",
                task_count(),
                goro::stats().threads
            )
        },
    );
    eprintln!(
        "{n} lock-and-exit goroutines: {tasks_before} -> {} tasks, {ms_before} -> {} Ms",
        task_count(),
        goro::stats().threads
    );
    // The scheduler still runs goroutines on the remaining Ms.
    let sum: u64 = goro::run(|| {
        (0..100u64)
            .map(|i| goro::go!(move || i))
            .map(|h| h.join().unwrap())
            .sum()
    });
    assert_eq!(sum, 4950);
}

/// The calling thread's CPU affinity, as a sorted list of CPUs.
fn affinity() -> Vec<usize> {
    // SAFETY: set is a valid cpu_set_t out-parameter of the size we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let r = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(r, 0, "sched_getaffinity");
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: set is initialised by CPU_ZERO/CPU_SET before use.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(r, 0, "sched_setaffinity");
    }
}

/// The calling thread's blocked standard signals (1..32).
fn blocked_signals() -> Vec<i32> {
    // SAFETY: a null new set only queries; old is a valid out-parameter.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old);
        assert_eq!(r, 0, "pthread_sigmask");
        (1..32)
            .filter(|&s| libc::sigismember(&old, s) == 1)
            .collect()
    }
}

/// Blocks `sig` on the calling thread.
fn block_signal(sig: i32) {
    // SAFETY: set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        assert_eq!(r, 0, "pthread_sigmask");
    }
}

/// A gate the blocked goroutines wait behind (a std condvar: they wait in
/// `goro::blocking`, holding their threads).
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

/// Go's templateThread: a locked goroutine pins its thread to one CPU and
/// blocks SIGUSR2, then makes its thread hand off its P again and again
/// while every M is kept busy, so new Ms are needed; each new M's thread
/// (observed from a goroutine blocked on it) has the affinity and signal
/// mask of the rest of the process, not the locked thread's.
#[test]
fn new_threads_do_not_inherit_locked_thread_state() {
    let _w = common::watchdog();
    let _s = serial();
    // The test thread's state is the process default.
    let base_cpus = affinity();
    let base_mask = blocked_signals();
    assert!(
        !base_mask.contains(&libc::SIGUSR2),
        "SIGUSR2 blocked already"
    );
    goro::run(|| ());
    // More rounds than Ms exist, so some rounds must create an M.
    let rounds = goro::stats().threads + 8;
    let (cpus, mask) = (base_cpus.clone(), base_mask.clone());
    let reports = goro::run(move || {
        goro::go!(move || {
            goro::lock_os_thread();
            pin_to(cpus[0]);
            block_signal(libc::SIGUSR2);
            // The setup took effect on this thread (else the test is void).
            assert_eq!(affinity(), vec![cpus[0]]);
            assert!(blocked_signals().contains(&libc::SIGUSR2));
            assert_ne!(blocked_signals(), mask);
            let gate = Arc::new(Gate {
                open: Mutex::new(false),
                cv: Condvar::new(),
            });
            let (rep_tx, rep_rx) = std::sync::mpsc::channel();
            let mut held = Vec::new();
            let mut reports = Vec::new();
            for _ in 0..rounds {
                let (rep_tx, gate) = (rep_tx.clone(), gate.clone());
                held.push(goro::go!(move || {
                    goro::blocking(|| {
                        rep_tx.send((tid(), affinity(), blocked_signals())).unwrap();
                        let mut open = gate.open.lock().unwrap();
                        while !*open {
                            open = gate.cv.wait(open).unwrap();
                        }
                    })
                }));
                // Hand our P (with that goroutine on it) off from this
                // thread until the goroutine reports from its own M.
                reports.push(goro::blocking(|| rep_rx.recv().unwrap()));
            }
            *gate.open.lock().unwrap() = true;
            gate.cv.notify_all();
            for h in held {
                h.join().unwrap();
            }
            // Exit while locked: this thread exits.
            reports
        })
        .join()
        .unwrap()
    });
    let tids: HashSet<i64> = reports.iter().map(|r| r.0).collect();
    assert_eq!(
        tids.len(),
        reports.len(),
        "two blocked goroutines on one thread"
    );
    for (t, cpus, mask) in &reports {
        assert_eq!(
            cpus, &base_cpus,
            "thread {t} inherited the locked thread's CPU affinity"
        );
        assert_eq!(
            mask, &base_mask,
            "thread {t} inherited the locked thread's signal mask"
        );
    }
}

/// Waits for `pid` and returns its wait status.
fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: status is a valid out-parameter; pid is our child.
    let r = goro::blocking(|| unsafe { libc::waitpid(pid, &mut status, 0) });
    assert_eq!(r, pid, "waitpid");
    status
}

/// fork() from a goroutine while other goroutines keep the scheduler busy
/// (channel ping-pong on every P, so runtime locks are taken at fork time):
/// a child that only calls `_exit`, `exit` or `execv` does so without
/// hanging, and the parent collects its status. (Using goro in the child
/// is unsupported, as in Go.)
#[test]
fn fork_child_exits_or_execs() {
    let _w = common::watchdog();
    let _s = serial();
    let rounds = if qemu() { 5 } else { 50 };
    let path = std::ffi::CString::new("/bin/true").unwrap();
    goro::run(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..goro::max_procs() * 2)
            .map(|_| {
                let stop = stop.clone();
                goro::go!(move || {
                    let (tx, rx) = goro::chan::<u32>(0);
                    let echo = goro::go!(move || for v in rx.iter() {
                        std::hint::black_box(v);
                    });
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        tx.send(i).unwrap();
                        i += 1;
                        // (A runnext ping-pong pair on every P starves the
                        // global queue, where the forking goroutine goes
                        // back after waitpid, for up to seconds: yield.)
                        if i % 64 == 0 {
                            goro::yield_now();
                        }
                    }
                    drop(tx);
                    echo.join().unwrap();
                })
            })
            .collect();
        let argv = [path.as_ptr(), std::ptr::null()];
        for round in 0..rounds {
            for how in 0..3 {
                // SAFETY: the child calls only async-signal-safe functions
                // (_exit, execv) or exit, and never returns into Rust code.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork failed");
                if pid == 0 {
                    // SAFETY: in the child: no Rust state is used again.
                    unsafe {
                        match how {
                            0 => libc::_exit(7),
                            1 => libc::exit(9),
                            _ => {
                                libc::execv(argv[0], argv.as_ptr());
                                libc::_exit(127)
                            }
                        }
                    }
                }
                let st = wait_child(pid);
                let want = [7, 9, 0][how];
                assert!(
                    libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == want,
                    "round {round}, child {how}: wait status {st:#x}, want exit {want}"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in busy {
            h.join().unwrap();
        }
    });
}

/// Two locked goroutines that hand the only P to each other (a channel
/// ping-pong) must not starve the global run queue: a goroutine started
/// from a plain thread (goro::run's) still runs, through findRunnable's
/// every-61st-schedule check of the global queue, which the direct P
/// hand-off between locked Ms skipped until session 21 (it hung).
#[test]
fn locked_ping_pong_does_not_starve_the_global_queue() {
    let _w = common::watchdog();
    let _s = serial();
    let prev = goro::set_max_procs(1);
    let done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (a_tx, a_rx) = goro::chan::<u64>(0);
    let (b_tx, b_rx) = goro::chan::<u64>(0);
    let (d, r) = (done.clone(), rounds.clone());
    let ping = goro::go!(move || {
        goro::lock_os_thread();
        let mut v = 0;
        while !d.load(Ordering::Relaxed) {
            a_tx.send(v).unwrap();
            v = b_rx.recv().unwrap();
            r.store(v, Ordering::Relaxed);
        }
    });
    let pong = goro::go!(move || {
        goro::lock_os_thread();
        while let Ok(v) = a_rx.recv() {
            if b_tx.send(v + 1).is_err() {
                break;
            }
        }
    });
    // The pair owns the P once it has exchanged a few values.
    while rounds.load(Ordering::Relaxed) < 100 {
        std::thread::yield_now();
    }
    let d = done.clone();
    goro::run(move || d.store(true, Ordering::Relaxed));
    ping.join().unwrap();
    pong.join().unwrap();
    goro::set_max_procs(prev);
}
