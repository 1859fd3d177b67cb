//! Observability and async interop (issue 12): wait reasons, goro::dump,
//! SIGQUIT dumps, deadlock detection (Go's checkdead) and goro::block_on.
//!
//! `harness = false`: the deadlock scenarios run in child processes that
//! must contain no thread besides the runtime's and the one in `goro::run`
//! (libtest's harness thread would be a possible waker and, soundly,
//! suppress every report). `main` below is a minimal test runner:
//! `cargo test --test observe [FILTER]`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const CHILD_ENV: &str = "GORO_OBSERVE_CHILD";

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    ("block_on_thread_waker", block_on_thread_waker),
    ("block_on_wake_twice", block_on_wake_twice),
    (
        "block_on_wake_after_completion",
        block_on_wake_after_completion,
    ),
    ("block_on_wake_inside_poll", block_on_wake_inside_poll),
    (
        "block_on_waker_clones_on_threads",
        block_on_waker_clones_on_threads,
    ),
    ("block_on_plain_thread", block_on_plain_thread),
    ("block_on_futures_channels", block_on_futures_channels),
    ("block_on_async_channel", block_on_async_channel),
    ("dump_lists_wait_reasons", dump_lists_wait_reasons),
    ("dump_races_named_exits", dump_races_named_exits),
    ("sigquit_dump", sigquit_dump),
    ("gotraceback_crash_aborts", gotraceback_crash_aborts),
    ("trace_file", trace_file),
    ("trace_env", trace_env),
    ("trace_syscall_handoff", trace_syscall_handoff),
    ("trace_stop_during_syscall", trace_stop_during_syscall),
    ("trace_stale_generation_emit", trace_stale_generation_emit),
    ("trace_relative_path_chdir", trace_relative_path_chdir),
    (
        "trace_env_unwritable_is_reported",
        trace_env_unwritable_is_reported,
    ),
    (
        "trace_env_unwritable_on_deadlock_is_reported",
        trace_env_unwritable_on_deadlock_is_reported,
    ),
    (
        "trace_env_written_on_deadlock",
        trace_env_written_on_deadlock,
    ),
    ("park_stamp_fresh_after_idle", park_stamp_fresh_after_idle),
    (
        "scheddetail_names_wait_reasons",
        scheddetail_names_wait_reasons,
    ),
    ("deadlock_report", deadlock_report),
    ("deadlock_off", deadlock_off),
    (
        "deadlock_reported_after_plain_thread_exits",
        deadlock_reported_after_plain_thread_exits,
    ),
    (
        "deadlock_reported_after_plain_thread_exits_with_schedtrace",
        deadlock_reported_after_plain_thread_exits_with_schedtrace,
    ),
    ("no_deadlock_timer_pending", no_deadlock_timer_pending),
    ("no_deadlock_sleep_forever", no_deadlock_sleep_forever),
    ("no_deadlock_timeout_forever", no_deadlock_timeout_forever),
    (
        "no_deadlock_plain_thread_sender",
        no_deadlock_plain_thread_sender,
    ),
    ("no_deadlock_blocking_syscall", no_deadlock_blocking_syscall),
    (
        "no_deadlock_run_from_plain_thread",
        no_deadlock_run_from_plain_thread,
    ),
];

fn main() {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        child(&name);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (n, _) in TESTS {
            println!("{n}: test");
        }
        return;
    }
    let exact = args.iter().any(|a| a == "--exact");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, f) in TESTS {
        let selected = filters.is_empty()
            || filters.iter().any(|p| {
                if exact {
                    *name == p.as_str()
                } else {
                    name.contains(p.as_str())
                }
            });
        if !selected {
            continue;
        }
        ran += 1;
        let r = std::panic::catch_unwind(f);
        println!(
            "test {name} ... {}",
            if r.is_ok() { "ok" } else { "FAILED" }
        );
        if r.is_err() {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(101);
    }
}

// ---------------------------------------------------------------------------
// Child processes.

struct Out {
    code: Option<i32>,
    /// The signal that ended the child, if one did.
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Re-executes this binary as child `name` (under qemu when the tests run
/// there) and waits for it. `kill_after`: for a child expected to hang,
/// kill it after this long (a hang detector, not a speed assertion).
fn spawn_child(name: &str, envs: &[(&str, &str)], kill_after: Option<Duration>) -> Out {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = if common::qemu() && std::env::consts::ARCH == "aarch64" {
        let mut c = Command::new("qemu-aarch64");
        c.arg("-L").arg("/usr/aarch64-linux-gnu").arg(&exe);
        // qemu-user's own RCU thread never touches goro (deadlock.rs).
        c.env("GORO_DEADLOCK_EXTRA_THREADS", "1");
        c
    } else {
        Command::new(&exe)
    };
    cmd.env(CHILD_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // No core files from the children that end with SIGABRT
    // (GOTRACEBACK=crash), under qemu-user either (it writes its own).
    // SAFETY: setrlimit is async-signal-safe, as pre_exec requires, and
    // gets a valid rlimit.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let zero = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            Ok(())
        });
    }
    let mut ch = cmd.spawn().expect("spawn child");
    let limit = kill_after.unwrap_or(Duration::from_secs(if common::qemu() { 120 } else { 60 }));
    let start = std::time::Instant::now();
    let mut killed = false;
    while ch.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = ch.kill();
            killed = true;
            break;
        }
        // Polling a child process from the plain test thread.
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = ch.wait_with_output().unwrap();
    let out = Out {
        code: o.status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&o.status),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    if killed && kill_after.is_none() {
        panic!("child {name} hung\n{}\n{}", out.stdout, out.stderr);
    }
    out
}

fn child(name: &str) {
    match name {
        "deadlock" => child_deadlock(),
        "sigquit" => child_sigquit(),
        "timer" => child_timer(),
        "sleep_forever" => child_sleep_forever(),
        "timeout_forever" => child_timeout_forever(),
        "plain_sender" => child_plain_sender(),
        "thread_exits_later" => child_thread_exits_later(),
        "blocking" => child_blocking(),
        "run_from_plain" => child_run_from_plain(),
        "trace_env" => child_trace_env(),
        "trace_syscall_handoff" => child_trace_syscall_handoff(),
        "trace_stop_during_syscall" => child_trace_stop_during_syscall(),
        "dump_races_exits" => child_dump_races_exits(),
        "trace_chdir" => child_trace_chdir(),
        "park_stamp_after_idle" => child_park_stamp_after_idle(),
        "scheddetail" => child_scheddetail(),
        _ => panic!("unknown child {name}"),
    }
}

/// Two goroutines receive on channels nobody sends to; main joins them.
fn child_deadlock() {
    goro::run(|| {
        let (tx1, rx1) = goro::chan::<u32>(0);
        let (tx2, rx2) = goro::chan::<u32>(0);
        let a = goro::Builder::new()
            .name("waiter-a")
            .spawn(move || rx1.recv())
            .unwrap();
        let _b = goro::spawn(move || rx2.recv());
        let _keep = (tx1, tx2);
        let _ = a.join();
    });
    println!("not reached");
}

#[track_caller]
fn rejections_since(before: [u64; 4], i: usize) -> u64 {
    goro::__private::deadlock_rejections()[i] - before[i]
}

/// For a plain thread that will wake the goroutines: returns once a
/// deadlock check since `before` has stopped at condition `i`, i.e. once
/// the goroutines are all parked and the check has seen this thread as a
/// possible waker. Polled, so the order is certain, not timed (before
/// session 30 these senders slept 200 ms, and under qemu on a loaded
/// machine the goroutines were not all parked by then: CI saw
/// `[2, 0, 0, 0]`). After 60 s it returns anyway, and the caller's
/// `child_ok_after_rejection` reports the missing check.
fn await_rejection(before: [u64; 4], i: usize) {
    let t = std::time::Instant::now();
    while goro::__private::deadlock_rejections()[i] == before[i]
        && t.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(1)); // polling, not ordering
    }
}

/// A child's last step: at least one deadlock check since `before` stopped
/// at one of the conditions `which` (indices as in `rejections_since`);
/// then tells the parent it finished.
#[track_caller]
fn child_ok_after_rejection(before: [u64; 4], which: &[usize]) {
    let n: u64 = which.iter().map(|&i| rejections_since(before, i)).sum();
    assert!(n >= 1, "{:?}", goro::__private::deadlock_rejections());
    println!("child ok");
}

/// Goroutines parked on channels while one waits for a timer channel
/// (`select` on `time::after`): the pending timer is a possible waker.
fn child_timer() {
    // Two Ps: with one, the only M waits in netpoll for the timer and no
    // check runs at all (nothing to assert about). With two, the second M
    // goes idle while the first is busy or in netpoll.
    goro::start(goro::Config::from_env().max_procs(2)).unwrap();
    let before = goro::__private::deadlock_rejections();
    // A check stops at the M blocked in netpoll until the timer (0) or at
    // the timer itself (1). Another 200 ms round while none has: a slow
    // machine may not get an M idle inside one window (it still fails if
    // no check ever sees the timer, in 10 rounds).
    let seen = move || rejections_since(before, 0) + rejections_since(before, 1) > 0;
    goro::run(move || {
        for _ in 0..10 {
            let (tx, rx) = goro::chan::<u32>(0);
            let h = goro::spawn(move || rx.recv().unwrap());
            let t = goro::time::after(Duration::from_millis(200));
            goro::select! {
                recv(t) -> _ => {},
            }
            tx.send(7).unwrap();
            assert_eq!(h.join().unwrap(), 7);
            if seen() {
                break;
            }
        }
    });
    // At least one check ran while only the timer could wake anyone.
    child_ok_after_rejection(before, &[0, 1]);
}

/// Every goroutine sleeps for `Duration::MAX`, on a timer at i64::MAX (as
/// in Go: pending, never fires): asleep, not deadlocked.
fn child_sleep_forever() {
    goro::start(goro::Config::from_env().max_procs(2)).unwrap();
    goro::run(|| {
        let h = goro::spawn(|| goro::time::Timer::new(Duration::MAX).recv());
        goro::time::sleep(Duration::MAX);
        drop(h);
    });
}

/// Every form of channel wait with a timeout, each given `Duration::MAX`,
/// each on a channel of its own that nobody else uses.
fn child_timeout_forever() {
    goro::start(goro::Config::from_env().max_procs(2)).unwrap();
    goro::run(|| {
        let chans: Vec<_> = (0..6).map(|_| goro::chan::<u32>(0)).collect();
        let (txs, rxs): (Vec<_>, Vec<_>) = chans.into_iter().unzip();
        let forms: Vec<goro::JoinHandle<()>> = vec![
            goro::spawn({
                let rx = rxs[0].clone();
                move || {
                    let _ = rx.recv_timeout(Duration::MAX);
                }
            }),
            goro::spawn({
                let tx = txs[1].clone();
                move || {
                    let _ = tx.send_timeout(1, Duration::MAX);
                }
            }),
            goro::spawn({
                let rx = rxs[2].clone();
                move || {
                    let _ = goro::select_recv_timeout([&rx], Duration::MAX);
                }
            }),
            goro::spawn({
                let rx = rxs[3].clone();
                move || {
                    let mut s = goro::Select::new();
                    s.recv(&rx);
                    let _ = s.select_timeout(Duration::MAX).map(|op| op.index());
                }
            }),
            goro::spawn({
                let rx = rxs[4].clone();
                move || {
                    goro::select! {
                        recv(rx) -> _ => {},
                        default(Duration::MAX) => {},
                    }
                }
            }),
        ];
        let rx = rxs[5].clone();
        let _keep = (txs, rxs, forms);
        let _ = rx.recv_timeout(Duration::MAX);
    });
    println!("not reached");
}

/// A plain thread (started inside a goroutine) holds the Sender and sends
/// once a check has been held back by it (`await_rejection`).
fn child_plain_sender() {
    let before = goro::__private::deadlock_rejections();
    goro::run(move || {
        let (tx, rx) = goro::chan::<u32>(0);
        let (tx2, rx2) = goro::chan::<u32>(0);
        let h = goro::spawn(move || rx2.recv().unwrap());
        let t = std::thread::spawn(move || {
            await_rejection(before, 3);
            tx.send(5).unwrap();
        });
        let v = rx.recv().unwrap();
        tx2.send(v + 1).unwrap();
        assert_eq!(h.join().unwrap(), 6);
        goro::blocking(|| t.join().unwrap());
    });
    child_ok_after_rejection(before, &[3]);
}

/// The goroutines deadlock while a plain thread still lives (a possible
/// waker, so the check that runs as the last M goes idle does not
/// report); the thread exits, without touching goro, once it has seen
/// such a check rejected on condition 4 (an unaccounted thread): polled,
/// so the order is certain, not timed.
fn child_thread_exits_later() {
    let before = goro::__private::deadlock_rejections();
    let t = std::thread::spawn(move || {
        while goro::__private::deadlock_rejections()[3] == before[3] {
            std::thread::sleep(Duration::from_millis(1)); // polling, not ordering
        }
    });
    goro::run(|| {
        let (tx, rx) = goro::chan::<u32>(0);
        let _keep = tx;
        let _ = rx.recv();
    });
    drop(t);
    println!("not reached");
}

/// One goroutine sleeps in `goro::blocking` (status Syscall) then sends;
/// the others are parked on channels.
fn child_blocking() {
    let before = goro::__private::deadlock_rejections();
    // Another 200 ms round while no check has stopped at the M in the
    // call (2) or at netpoll (0): a slow machine may not get an M idle
    // inside one window (10 rounds at most).
    let seen = move || rejections_since(before, 0) + rejections_since(before, 2) > 0;
    goro::run(move || {
        for _ in 0..10 {
            let (tx, rx) = goro::chan::<u32>(0);
            let s = goro::spawn(move || {
                goro::blocking(|| std::thread::sleep(Duration::from_millis(200)));
                tx.send(9).unwrap();
            });
            assert_eq!(rx.recv().unwrap(), 9);
            s.join().unwrap();
            if seen() {
                break;
            }
        }
    });
    child_ok_after_rejection(before, &[0, 2]);
}

/// The plain main thread waits in goro::run; a plain thread started before
/// the runtime holds the Sender, a second plain thread is blocked in a goro
/// receive (a waiter); the sender sends once a check has been held back
/// by the plain threads (`await_rejection`).
fn child_run_from_plain() {
    let (tx, rx) = goro::chan::<u32>(0);
    let (tx3, rx3) = goro::chan::<u32>(0);
    let before = goro::__private::deadlock_rejections();
    let sender = std::thread::spawn(move || {
        await_rejection(before, 3);
        tx.send(1).unwrap();
    });
    let waiter = std::thread::spawn(move || rx3.recv().unwrap());
    let v = goro::run(move || {
        let (tx2, rx2) = goro::chan::<u32>(0);
        let h = goro::spawn(move || rx2.recv().unwrap());
        let v = rx.recv().unwrap();
        tx2.send(v).unwrap();
        h.join().unwrap()
    });
    assert_eq!(v, 1);
    tx3.send(2).unwrap();
    assert_eq!(waiter.join().unwrap(), 2);
    sender.join().unwrap();
    child_ok_after_rejection(before, &[3]);
}

/// Parks goroutines with several wait reasons, then raises SIGQUIT.
fn child_sigquit() {
    goro::run(|| {
        let (_tx, rx) = goro::chan::<u32>(0);
        let m = Arc::new(goro::sync::Mutex::new(0));
        let g = m.lock();
        let m2 = m.clone();
        let _a = goro::Builder::new()
            .name("quit-recv")
            .spawn(move || rx.recv())
            .unwrap();
        let _b = goro::spawn(move || *m2.lock());
        // Wait until both are parked (observed through the dump itself).
        loop {
            let mut v = Vec::new();
            goro::dump(&mut v).unwrap();
            let s = String::from_utf8(v).unwrap();
            if s.contains("[chan receive]") && s.contains("[sync.Mutex.Lock]") {
                break;
            }
            goro::yield_now();
        }
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGQUIT) };
        // The dump thread exits the process; park until it does.
        let _keep = g;
        goro::time::sleep(Duration::MAX);
    });
}

// ---------------------------------------------------------------------------
// Deadlock tests.

/// The child ended with Go's deadlock report and exit status 2.
#[track_caller]
fn assert_deadlock_reported(o: &Out) {
    assert_deadlock_report(o, false);
}

/// As [`assert_deadlock_reported`]; with `after_other_lines` the report
/// may follow other stderr output (schedtrace's SCHED lines) instead of
/// starting it.
#[track_caller]
fn assert_deadlock_report(o: &Out, after_other_lines: bool) {
    assert_deadlock_report_ending(o, after_other_lines, (Some(2), None));
}

/// As [`assert_deadlock_report`], the child ending as `end` says (exit
/// status, signal).
#[track_caller]
fn assert_deadlock_report_ending(
    o: &Out,
    after_other_lines: bool,
    end: (Option<i32>, Option<i32>),
) {
    assert_ended(o, end);
    let report = "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine ";
    let found = if after_other_lines {
        o.stderr.contains(report)
    } else {
        o.stderr.starts_with(report)
    };
    assert!(found, "{}", o.stderr);
    assert!(!o.stdout.contains("not reached"));
}

/// A goroutine's park stamp (the wait `dump` and the deadlock report
/// print as `, N minutes`, and the stack shrinker's park age) is the time
/// it parked, also when it parks right after the runtime was idle:
/// gopark reads sysmon's clock, which sysmon did not update while it
/// slept in its idle wait (up to 60 s), so a goroutine that woke and
/// parked again before sysmon got to run was stamped with the time sysmon
/// went to sleep (h45: parked for 500-750 ms by its stamp when it had
/// just parked; the stamp is documented as at most ~10 ms stale).
fn park_stamp_fresh_after_idle() {
    let o = spawn_child("park_stamp_after_idle", &[("GOMAXPROCS", "1")], None);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
}

/// The runtime idles for 1.5 s (the scenario: long enough for sysmon to
/// be asleep in its idle wait; the shrinker, whose passes would wake it,
/// is set to never act), then a plain thread wakes a goroutine that
/// parks again at once; its stamp must be recent.
fn child_park_stamp_after_idle() {
    let hour = Duration::from_secs(3600);
    goro::__private::set_stack_shrink(hour, hour);
    let (tx, rx) = goro::chan::<()>(0);
    let (atx, arx) = goro::chan::<()>(0);
    let g = goro::spawn(move || {
        for () in rx.iter() {
            atx.send(()).unwrap();
        }
    });
    let id = g.id();
    for round in 0..3 {
        common::wait_parked(id);
        std::thread::sleep(Duration::from_millis(1500));
        // The G parks after this send, so its stamp can be no older than
        // this (plus sysmon's clock, at most ~10 ms behind, and a margin).
        // Bounded by the time since the send, not a constant, so that a
        // slow machine cannot fail it; the bug stamped 500-750 ms.
        let sent = std::time::Instant::now();
        tx.send(()).unwrap();
        arx.recv().unwrap();
        common::wait_parked(id);
        let age = goro::__private::parked_for(id).unwrap();
        let bound = sent.elapsed() + Duration::from_millis(50);
        assert!(
            age < bound,
            "round {round}: parked for {age:?} by its stamp, just after parking (< {bound:?})"
        );
    }
    drop(tx);
    g.join().unwrap();
}

/// `GODEBUG=scheddetail=1` names a parked G's wait reason where Go does
/// (`G7: status=4(chan receive) m=-1 lockedm=-1`) and leaves it empty for
/// a running one (`status=2()`). Before, goro printed the status's own
/// name there: `status=4(Waiting)`.
fn scheddetail_names_wait_reasons() {
    let o = spawn_child("scheddetail", &[], None);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let id: u64 = o
        .stdout
        .trim()
        .parse()
        .expect("the child prints the G's id");
    let want = format!("  G{id}: status=4(chan receive) m=-1 lockedm=-1");
    assert!(
        o.stderr.lines().any(|l| l == want),
        "no line {want:?} in:\n{}",
        o.stderr
    );
    assert!(
        o.stderr.lines().any(|l| l.contains(": status=2() m=")),
        "no running G with an empty reason in:\n{}",
        o.stderr
    );
}

/// A goroutine parked in a channel receive; main (running) writes one
/// detail report.
fn child_scheddetail() {
    goro::run(|| {
        let (tx, rx) = goro::chan::<()>(0);
        let g = goro::spawn(move || rx.recv());
        common::wait_parked(g.id());
        println!("{}", g.id());
        goro::__private::sched_detail();
        drop(tx);
        let _ = g.join();
    });
}

fn deadlock_report() {
    let o = spawn_child("deadlock", &[], None);
    assert_deadlock_reported(&o);
    // main joins (printed as Go's chan receive), the two receivers.
    let headers: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("goroutine "))
        .collect();
    assert_eq!(headers.len(), 3, "{}", o.stderr);
    for h in &headers {
        assert!(h.ends_with(" [chan receive]:"), "{h}\n{}", o.stderr);
    }
    assert!(o.stderr.contains("\tname: \"waiter-a\""), "{}", o.stderr);
    assert!(!o.stdout.contains("not reached"));
    eprintln!("--- sample deadlock report:\n{}", o.stderr);
}

/// A plain thread that exits after the goroutines deadlocked no longer
/// hides the deadlock: sysmon re-runs the check while the process stays
/// idle (doubling from 50 ms). Before session 25 the program hung, since
/// the only check ran when the last M went idle, while the thread still
/// lived (h14; Go reports, as it counts only its own threads).
fn deadlock_reported_after_plain_thread_exits() {
    let o = spawn_child("thread_exits_later", &[], None);
    assert_deadlock_reported(&o);
}

/// The same with `GODEBUG=schedtrace=1000` (turned on to look at a hang):
/// sysmon then never takes its idle wait, where it re-ran the held-back
/// check, so the program hung where it reports without schedtrace (h45).
/// The SCHED lines come before the report on stderr. A child still alive
/// after 20 s (60 under qemu) is killed: a hang detector, the recheck
/// comes within about a second of the thread's exit.
fn deadlock_reported_after_plain_thread_exits_with_schedtrace() {
    let o = spawn_child(
        "thread_exits_later",
        &[("GODEBUG", "schedtrace=1000")],
        Some(Duration::from_secs(if common::qemu() { 60 } else { 20 })),
    );
    assert_deadlock_report(&o, true);
}

/// With detection off the same program hangs (it is killed after 3 s, a
/// hang detector: a report would have come within one M going idle).
fn deadlock_off() {
    let o = spawn_child(
        "deadlock",
        &[("GODEBUG", "gorodeadlock=0")],
        Some(Duration::from_secs(if common::qemu() { 10 } else { 3 })),
    );
    assert_ne!(o.code, Some(2), "{}", o.stderr);
    assert!(!o.stderr.contains("deadlock"), "{}", o.stderr);
}

fn expect_ok(name: &str) {
    expect_ok_with(name, &[]);
}

/// Runs child `name` with `env` added: it must exit 0 after printing
/// "child ok", with no deadlock report.
fn expect_ok_with(name: &str, env: &[(&str, &str)]) {
    let o = spawn_child(name, env, None);
    assert_eq!(
        o.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        o.stdout,
        o.stderr
    );
    assert!(o.stdout.contains("child ok"), "{}", o.stdout);
    assert!(!o.stderr.contains("deadlock"), "{}", o.stderr);
}

fn no_deadlock_timer_pending() {
    expect_ok("timer");
}

/// `sleep(Duration::MAX)` and a `Duration::MAX` timer sleep forever, as in
/// Go (killed after 3 s, a hang detector as in `deadlock_off`). Before
/// session 21 they parked with no timer and were reported as a deadlock.
fn no_deadlock_sleep_forever() {
    expect_asleep("sleep_forever");
}

/// Runs child `name`, which must still be alive (asleep) when it is killed
/// after 3 s (10 s under qemu), with no deadlock report.
fn expect_asleep(name: &str) {
    let o = spawn_child(
        name,
        &[],
        Some(Duration::from_secs(if common::qemu() { 10 } else { 3 })),
    );
    assert_ne!(o.code, Some(2), "{}", o.stderr);
    assert!(!o.stderr.contains("deadlock"), "{}", o.stderr);
}

/// Channel waits whose timeout overflows (`Duration::MAX`) wait forever on
/// a pending timer, as a `sleep(Duration::MAX)` and Go's `select` with a
/// `time.After(math.MaxInt64)` case do: asleep, not deadlocked (killed
/// after 3 s, a hang detector). Before session 30 they armed no timer and
/// the check reported a deadlock at once (h41).
fn no_deadlock_timeout_forever() {
    expect_asleep("timeout_forever");
}

fn no_deadlock_plain_thread_sender() {
    expect_ok("plain_sender");
}

fn no_deadlock_blocking_syscall() {
    expect_ok("blocking");
}

fn no_deadlock_run_from_plain_thread() {
    expect_ok("run_from_plain");
}

// ---------------------------------------------------------------------------
// Dump.

/// `dump` while named goroutines exit on another P: every name it prints
/// is whole (h27: it read the name of a goroutine exiting meanwhile after
/// the exit freed it: garbage, or SIGSEGV for a name large enough to be
/// unmapped). In a child whose allocator unmaps every name when it is
/// freed (`MALLOC_MMAP_THRESHOLD_` below their size).
fn dump_races_named_exits() {
    expect_ok_with("dump_races_exits", &[("MALLOC_MMAP_THRESHOLD_", "131072")]);
}

/// Two goroutines spawn and join goroutines named with 256 KiB of `x`
/// while this one dumps until it has printed 100 of those names (or
/// 20,000 dumps went by: the check is then weaker, not failed).
fn child_dump_races_exits() {
    const NAME_LEN: usize = 256 << 10;
    goro::start(goro::Config::from_env().max_procs(2)).unwrap();
    goro::run(|| {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawners: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                goro::spawn(move || {
                    let name = "x".repeat(NAME_LEN);
                    while !stop.load(Ordering::Relaxed) {
                        let b = goro::Builder::new().name(name.clone());
                        b.spawn(|| ()).unwrap().join().unwrap();
                    }
                })
            })
            .collect();
        let (mut seen, mut dumps) = (0, 0);
        while seen < 100 && dumps < 20_000 {
            let mut out = Vec::new();
            goro::dump(&mut out).unwrap();
            dumps += 1;
            let text = String::from_utf8_lossy(&out);
            for line in text.lines() {
                if let Some(name) = line.strip_prefix("\tname: \"") {
                    let whole = name.len() == NAME_LEN + 1
                        && name.bytes().take(NAME_LEN).all(|b| b == b'x');
                    assert!(whole, "a torn name: {:?}", &name[..name.len().min(64)]);
                    seen += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in spawners {
            h.join().unwrap();
        }
        println!("child ok: {seen} names in {dumps} dumps");
    });
}

fn dump_lists_wait_reasons() {
    common::run(|| {
        let (tx, rx) = goro::chan::<u32>(0);
        let (stx, srx) = goro::chan::<u32>(0);
        let wg = goro::sync::WaitGroup::new();
        wg.add(1);
        let m = Arc::new(goro::sync::Mutex::new(()));
        let guard = m.lock();
        let rw = Arc::new(goro::sync::RwLock::new(()));
        let wguard = rw.write();
        let mut hs: Vec<goro::JoinHandle<()>> = Vec::new();
        let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
        let rec = |h: &goro::JoinHandle<()>| ids.lock().unwrap().push(h.id());
        let h = goro::Builder::new()
            .name("dump-recv")
            .spawn(move || {
                let _ = rx.recv();
            })
            .unwrap();
        rec(&h);
        hs.push(h);
        let h = goro::spawn(move || {
            let _ = stx.send(1);
        });
        rec(&h);
        hs.push(h);
        let wg2 = wg.clone();
        let h = goro::spawn(move || wg2.wait());
        rec(&h);
        hs.push(h);
        let m2 = m.clone();
        let h = goro::spawn(move || drop(m2.lock()));
        rec(&h);
        hs.push(h);
        let rw2 = rw.clone();
        let h = goro::spawn(move || drop(rw2.read()));
        rec(&h);
        hs.push(h);
        // A writer waiting for a reader to leave.
        let rw_r = Arc::new(goro::sync::RwLock::new(()));
        let rguard = rw_r.read();
        let rw_r2 = rw_r.clone();
        let h = goro::spawn(move || drop(rw_r2.write()));
        rec(&h);
        hs.push(h);
        let pair = Arc::new((goro::sync::Mutex::new(false), goro::sync::Cond::new()));
        let pair2 = pair.clone();
        let h = goro::spawn(move || {
            let mut g = pair2.0.lock();
            while !*g {
                g = pair2.1.wait(g);
            }
        });
        rec(&h);
        hs.push(h);
        let sem = Arc::new(goro::sync::Semaphore::new(0));
        let sem2 = sem.clone();
        let h = goro::spawn(move || sem2.acquire());
        rec(&h);
        hs.push(h);
        let (sel_tx, sel_rx) = goro::chan::<u32>(0);
        let (sel_tx2, sel_rx2) = goro::chan::<u32>(0);
        let h = goro::spawn(move || {
            goro::select! {
                recv(sel_rx) -> _ => {},
                recv(sel_rx2) -> _ => {},
            }
        });
        rec(&h);
        hs.push(h);
        let h = goro::spawn(|| goro::time::sleep(Duration::from_secs(3600)));
        rec(&h);
        hs.push(h);
        let want = [
            "[chan receive]",
            "[chan send]",
            "[sync.WaitGroup.Wait]",
            "[sync.Mutex.Lock]",
            "[sync.RWMutex.RLock]",
            "[sync.RWMutex.Lock]",
            "[sync.Cond.Wait]",
            "[semacquire]",
            "[select]",
            "[sleep]",
        ];
        assert_eq!(want.len(), hs.len());
        let ids = ids.lock().unwrap().clone();
        let text = loop {
            let mut v = Vec::new();
            goro::dump(&mut v).unwrap();
            let s = String::from_utf8(v).unwrap();
            let all = ids.iter().zip(want.iter()).all(|(id, r)| {
                s.lines()
                    .any(|l| l.starts_with(&format!("goroutine {id} {r}")))
            });
            if all {
                break s;
            }
            goro::yield_now();
        };
        let me = goro::current_id().unwrap();
        assert!(
            text.contains(&format!("goroutine {me} [running]:")),
            "{text}"
        );
        assert!(text.contains("\tname: \"dump-recv\""), "{text}");
        eprintln!("--- sample dump:\n{text}");
        drop(tx);
        drop(srx);
        wg.done();
        drop(guard);
        drop(wguard);
        drop(rguard);
        *pair.0.lock() = true;
        pair.1.notify_all();
        sem.release();
        drop(sel_tx);
        drop(sel_tx2);
        let sleeper = hs.pop().unwrap();
        for h in hs {
            h.join().unwrap();
        }
        drop(sleeper);
        // The sleeper is left parked (detached).
    });
}

/// The child ended as `end` says: (exit status, signal).
#[track_caller]
fn assert_ended(o: &Out, end: (Option<i32>, Option<i32>)) {
    assert_eq!(
        (o.code, o.signal),
        end,
        "stdout:\n{}\nstderr:\n{}",
        o.stdout,
        o.stderr
    );
}

/// The "sigquit" child printed its dump on SIGQUIT and ended as `end` says.
#[track_caller]
fn assert_sigquit_dump(o: &Out, end: (Option<i32>, Option<i32>)) {
    assert_ended(o, end);
    assert!(
        o.stderr.starts_with("SIGQUIT: quit\n\ngoroutine "),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(" [chan receive]:\n\tname: \"quit-recv\""),
        "{}",
        o.stderr
    );
}

fn sigquit_dump() {
    let o = spawn_child("sigquit", &[("GOTRACEBACK", "all")], None);
    assert_sigquit_dump(&o, (Some(2), None));
    assert!(o.stderr.contains(" [sync.Mutex.Lock]:"), "{}", o.stderr);
    eprintln!("--- sample SIGQUIT dump:\n{}", o.stderr);
}

/// `GOTRACEBACK=crash` (Go's crash()): the SIGQUIT dump and the deadlock
/// report print as before and then end the process with SIGABRT, where
/// the default ends it with exit status 2 (sigquit_dump, deadlock_report).
/// Before session 33 both exited with status 2.
fn gotraceback_crash_aborts() {
    let o = spawn_child("sigquit", &[("GOTRACEBACK", "crash")], None);
    assert_sigquit_dump(&o, (None, Some(libc::SIGABRT)));
    let o = spawn_child("deadlock", &[("GOTRACEBACK", "crash")], None);
    assert_deadlock_report_ending(&o, false, (None, Some(libc::SIGABRT)));
}

// ---------------------------------------------------------------------------
// block_on.

/// Pending until `ready` is set; records its waker for others to call.
struct Gate {
    ready: Arc<std::sync::atomic::AtomicBool>,
    waker: Arc<std::sync::Mutex<Option<Waker>>>,
    polls: Arc<AtomicUsize>,
}

impl Future for Gate {
    type Output = usize;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        // `polls` counts the Pending results, published only once this poll
        // is over with its waker stored: a thread that saw `polls >= k`
        // and then sets `ready` is sure poll k did not see it.
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.ready.load(Ordering::SeqCst) {
            Poll::Ready(self.polls.load(Ordering::SeqCst) + 1)
        } else {
            self.polls.fetch_add(1, Ordering::SeqCst);
            Poll::Pending
        }
    }
}

/// A Gate and the handles a test keeps: its `ready` flag, its last
/// waker, its poll count.
type GateParts = (
    Gate,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::Mutex<Option<Waker>>>,
    Arc<AtomicUsize>,
);

fn gate() -> GateParts {
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waker = Arc::new(std::sync::Mutex::new(None));
    let polls = Arc::new(AtomicUsize::new(0));
    (
        Gate {
            ready: ready.clone(),
            waker: waker.clone(),
            polls: polls.clone(),
        },
        ready,
        waker,
        polls,
    )
}

/// Waits (yielding) until the future has returned Pending `n` times.
fn wait_polls(polls: &AtomicUsize, n: usize) {
    while polls.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
}

fn block_on_thread_waker() {
    for _ in 0..common::scale(200) {
        common::run(|| {
            let (g, ready, waker, polls) = gate();
            let t = std::thread::spawn(move || {
                wait_polls(&polls, 1);
                ready.store(true, Ordering::SeqCst);
                waker.lock().unwrap().take().unwrap().wake();
            });
            let n = goro::block_on(g);
            // Ready on the poll after the single wake.
            assert_eq!(n, 2);
            goro::blocking(|| t.join().unwrap());
        });
    }
}

fn block_on_wake_twice() {
    common::run(|| {
        let (g, ready, waker, polls) = gate();
        let t = std::thread::spawn(move || {
            wait_polls(&polls, 1);
            let w = waker.lock().unwrap().clone().unwrap();
            w.wake_by_ref();
            w.wake_by_ref();
            wait_polls(&polls, 2);
            ready.store(true, Ordering::SeqCst);
            w.wake_by_ref();
            w.wake();
        });
        // Pending twice at least (the second wait), then Ready; a double
        // goready would throw (bad G status transition).
        let n = goro::block_on(g);
        assert!(n >= 3, "{n}");
        goro::blocking(|| t.join().unwrap());
    });
}

fn block_on_wake_after_completion() {
    common::run(|| {
        let (g, ready, waker, _polls) = gate();
        ready.store(true, Ordering::SeqCst);
        assert_eq!(goro::block_on(g), 1);
        let w = waker.lock().unwrap().take().unwrap();
        // Late wakes on this and another thread, while the goroutine goes
        // on parking for other reasons: must be no-ops.
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..100 {
                w2.wake_by_ref();
            }
        });
        w.wake_by_ref();
        let (tx, rx) = goro::chan::<u32>(0);
        let h = goro::spawn(move || {
            for i in 0..100 {
                tx.send(i).unwrap();
            }
        });
        let sum: u32 = rx.iter().sum();
        assert_eq!(sum, 4950);
        h.join().unwrap();
        goro::blocking(|| t.join().unwrap());
        w.wake();
    });
}

/// Wakes itself inside poll before returning Pending, twice, then Ready.
struct SelfWake(usize);

impl Future for SelfWake {
    type Output = usize;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        self.0 += 1;
        if self.0 < 3 {
            cx.waker().wake_by_ref();
            Poll::Pending
        } else {
            Poll::Ready(self.0)
        }
    }
}

fn block_on_wake_inside_poll() {
    assert_eq!(common::run(|| goro::block_on(SelfWake(0))), 3);
    // And on a plain thread.
    assert_eq!(goro::block_on(SelfWake(0)), 3);
}

fn block_on_waker_clones_on_threads() {
    common::run(|| {
        let (g, ready, waker, polls) = gate();
        let w = waker.clone();
        let ts: Vec<_> = (0..4)
            .map(|i| {
                let w = w.clone();
                let polls = polls.clone();
                let ready = ready.clone();
                std::thread::spawn(move || {
                    wait_polls(&polls, 1);
                    let wk = w.lock().unwrap().clone().unwrap();
                    let c = wk.clone();
                    drop(wk);
                    if i == 3 {
                        ready.store(true, Ordering::SeqCst);
                    }
                    c.wake();
                })
            })
            .collect();
        let n = goro::block_on(g);
        assert!(n >= 2);
        goro::blocking(|| ts.into_iter().for_each(|t| t.join().unwrap()));
    });
}

fn block_on_plain_thread() {
    let (g, ready, waker, polls) = gate();
    let t = std::thread::spawn(move || {
        wait_polls(&polls, 1);
        ready.store(true, Ordering::SeqCst);
        waker.lock().unwrap().take().unwrap().wake();
    });
    assert_eq!(goro::block_on(g), 2);
    t.join().unwrap();
}

fn block_on_futures_channels() {
    use futures::channel::{mpsc, oneshot};
    use futures::{SinkExt, StreamExt};
    common::run(|| {
        let (mut tx, mut rx) = mpsc::channel::<u32>(1);
        let (otx, orx) = oneshot::channel::<u32>();
        // Producer goroutine: sends through the bounded futures channel
        // (its Pending parks this goroutine too).
        let p = goro::spawn(move || {
            goro::block_on(async move {
                for i in 0..1000 {
                    tx.send(i).await.unwrap();
                }
            })
        });
        // A plain thread completes the oneshot.
        let t = std::thread::spawn(move || otx.send(42).unwrap());
        let sum = goro::block_on(async move {
            let mut s = 0u32;
            while let Some(v) = rx.next().await {
                s += v;
            }
            s + orx.await.unwrap()
        });
        assert_eq!(sum, 499_500 + 42);
        p.join().unwrap();
        goro::blocking(|| t.join().unwrap());
    });
}

fn block_on_async_channel() {
    common::run(|| {
        let (tx, rx) = async_channel::bounded::<u64>(4);
        let consumers: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                goro::spawn(move || {
                    goro::block_on(async move {
                        let mut s = 0u64;
                        while let Ok(v) = rx.recv().await {
                            s += v;
                        }
                        s
                    })
                })
            })
            .collect();
        drop(rx);
        let t = std::thread::spawn({
            let tx = tx.clone();
            move || {
                for i in 0..500 {
                    tx.send_blocking(i).unwrap();
                }
            }
        });
        goro::block_on(async move {
            for i in 500..1000 {
                tx.send(i).await.unwrap();
            }
        });
        goro::blocking(|| t.join().unwrap());
        let total: u64 = consumers.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 499_500);
    });
}

// ---------------------------------------------------------------------------
// Execution trace.

/// Ping-pong between two goroutines, returning (pinger id, ponger id).
fn ping_pong(n: u32) -> (u64, u64) {
    // Each side sends only once the other is parked in its receive, so
    // both park ("chan receive") and are unparked every round whatever the
    // timing of the two Ps (free-running, one side can go without parking:
    // seen once in 300 runs under load).
    let (tx, rx) = goro::chan::<u32>(0);
    let (btx, brx) = goro::chan::<u32>(0);
    let me = goro::current_id().unwrap();
    let ponger = goro::spawn(move || {
        for v in rx.iter() {
            common::wait_parked(me);
            btx.send(v + 1).unwrap();
        }
    });
    let pid = ponger.id();
    for i in 0..n {
        common::wait_parked(pid);
        tx.send(i).unwrap();
        assert_eq!(brx.recv().unwrap(), i + 1);
    }
    drop(tx);
    ponger.join().unwrap();
    (me, pid)
}

fn trace_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("goro-trace-{}-{tag}.json", std::process::id()))
}

/// Parses a trace and checks its shape; returns the events.
fn check_trace(path: &std::path::Path, ids: &[u64]) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap().clone();
    for &id in ids {
        let g = format!("G{id}");
        assert!(
            evs.iter()
                .any(|e| e["ph"] == "X" && e["name"] == g.as_str()),
            "no slice for {g}"
        );
        assert!(
            evs.iter()
                .any(|e| e["name"] == "park" && e["args"]["goid"] == id),
            "no park for {g}"
        );
        assert!(
            evs.iter()
                .any(|e| e["name"] == "unpark" && e["args"]["goid"] == id),
            "no unpark for {g}"
        );
    }
    for &id in ids {
        assert!(
            evs.iter().any(|e| e["name"] == "park"
                && e["args"]["goid"] == id
                && e["args"]["reason"] == "chan receive"),
            "no \"chan receive\" park for G{id}"
        );
    }
    for e in evs.iter().filter(|e| e["name"] == "park") {
        assert!(
            !e["args"]["reason"].as_str().unwrap_or("").is_empty(),
            "park without a wait reason: {e}"
        );
    }
    // Each park of these goroutines is followed by an unpark before the
    // next park (they all ran to completion before the trace stopped).
    for &id in ids {
        let mut pu: Vec<(f64, u8)> = evs
            .iter()
            .filter(|e| e["args"]["goid"] == id && (e["name"] == "park" || e["name"] == "unpark"))
            .map(|e| (e["ts"].as_f64().unwrap(), u8::from(e["name"] == "unpark")))
            .collect();
        pu.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut parked = false;
        for (ts, unpark) in pu {
            if unpark == 1 {
                parked = false;
            } else {
                assert!(!parked, "G{id} parked twice without an unpark (at {ts} µs)");
                parked = true;
            }
        }
        assert!(!parked, "G{id}'s last park has no unpark");
    }
    assert_tracks_named_no_overlap(&evs);
    evs
}

/// Every event's track is named, and slices on one P never overlap.
fn assert_tracks_named_no_overlap(evs: &[serde_json::Value]) {
    let named: Vec<i64> = evs
        .iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| e["tid"].as_i64().unwrap())
        .collect();
    let mut by_p: std::collections::BTreeMap<i64, Vec<(f64, f64, String)>> = Default::default();
    for e in evs {
        let tid = e["tid"].as_i64().unwrap();
        assert!(named.contains(&tid), "unnamed track {tid}");
        if e["ph"] == "X" {
            assert!(tid >= 0);
            by_p.entry(tid).or_default().push((
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    for (p, mut v) in by_p {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for w in v.windows(2) {
            // 1 ns of slack for the µs rounding of two f64s.
            assert!(w[1].0 + 0.001 >= w[0].0 + w[0].1, "overlap on P{p}: {w:?}");
        }
    }
}

fn trace_file() {
    let path = trace_path("api");
    common::run(move || {
        assert_eq!(
            goro::trace::stop().unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        goro::trace::start(&path).unwrap();
        assert_eq!(
            goro::trace::start(&path).unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        let (a, b) = ping_pong(100);
        // A guarded blocking call: syscall enter/exit events.
        let sys = goro::spawn(|| {
            goro::blocking(|| std::hint::black_box(1));
            goro::current_id().unwrap()
        });
        let sys = sys.join().unwrap();
        // A busy P for 20 ms: sysmon, awake while any P is busy, samples
        // the scheduler counters at most once per millisecond (the
        // scenario, not synchronisation).
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        goro::trace::stop().unwrap();
        let evs = check_trace(&path, &[a, b]);
        assert!(evs
            .iter()
            .any(|e| e["name"] == "spawn" && e["args"]["goid"] == b));
        for name in ["syscall enter", "syscall exit"] {
            assert!(
                evs.iter()
                    .any(|e| e["name"] == name && e["args"]["goid"] == sys),
                "no {name} for G{sys}"
            );
        }
        // At least the samples taken by start and stop (sysmon's periodic
        // ones depend on its timing).
        let cs: Vec<_> = evs
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == "scheduler")
            .collect();
        assert!(cs.len() >= 2, "{} scheduler counter events", cs.len());
        for c in cs {
            assert!(
                c["args"]["runnable Gs"].is_u64() && c["args"]["idle Ps"].is_u64(),
                "{c}"
            );
        }
        let _ = std::fs::remove_file(&path);
    });
}

fn child_trace_env() {
    let ids = goro::run(|| ping_pong(50));
    println!("ids {} {}", ids.0, ids.1);
}

/// GORO_TRACE with a deadlock report, which ends the process with _exit
/// (no atexit): the trace is written anyway, and shows the goroutines
/// that deadlocked. It was an empty file before session 21.
fn trace_env_written_on_deadlock() {
    let path = trace_path("deadlock");
    let o = spawn_child("deadlock", &[("GORO_TRACE", path.to_str().unwrap())], None);
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let evs = doc["traceEvents"].as_array().unwrap();
    assert!(evs.iter().any(|e| e["name"] == "spawn"), "{text}");
    let _ = std::fs::remove_file(&path);
}

/// GORO_TRACE naming a file that cannot be created (a missing directory)
/// or written (/dev/full): the program runs and stderr says why there is
/// no trace (h27: nothing said either way).
fn trace_env_unwritable_is_reported() {
    for (path, what) in [
        ("/nonexistent-goro-dir/trace.json", "cannot create"),
        ("/dev/full", "cannot write"),
    ] {
        let o = spawn_child("trace_env", &[("GORO_TRACE", path)], None);
        assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
        assert!(o.stdout.contains("ids "), "{}", o.stdout);
        let said = format!("goro: GORO_TRACE={path}: {what} the trace file: ");
        assert!(o.stderr.contains(&said), "no {said:?} in {:?}", o.stderr);
    }
}

/// GORO_TRACE naming a file that cannot be written (/dev/full) with a
/// deadlock report, which writes the trace before its _exit: stderr says
/// why there is no trace, as at a normal exit (h31: nothing was said).
fn trace_env_unwritable_on_deadlock_is_reported() {
    let o = spawn_child("deadlock", &[("GORO_TRACE", "/dev/full")], None);
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("all goroutines are asleep"),
        "{}",
        o.stderr
    );
    let said = "goro: GORO_TRACE=/dev/full: cannot write the trace file: ";
    assert!(o.stderr.contains(said), "no {said:?} in {:?}", o.stderr);
}

/// A goroutine whose P is handed off while it is in a system call: its
/// slice on that P ends at the hand-off, and the goroutines that run on
/// the P meanwhile get their own slices, which never overlap it (h31
/// found the blocked goroutine's slice left open on the P until the call
/// returned, with the other goroutines' slices inside it). One P, in a
/// child; every hand-off is forced by the workload, not by timing: the
/// blocked goroutine waits until another goroutine has run on its P.
fn trace_syscall_handoff() {
    let path = trace_path("handoff");
    let o = spawn_child(
        "trace_syscall_handoff",
        &[("GORO_TEST_TRACE", path.to_str().unwrap())],
        None,
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let line = o.stdout.lines().find(|l| l.starts_with("ids ")).unwrap();
    let ids: Vec<u64> = line[4..].split(' ').map(|x| x.parse().unwrap()).collect();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap();
    assert_tracks_named_no_overlap(evs);
    // Each phase handed the P off at least once, and its blocked goroutine
    // (ids[0], the main goroutine) was seen leaving the call.
    let handoffs = evs
        .iter()
        .filter(|e| e["name"] == "syscall handoff")
        .count();
    assert!(handoffs >= 3, "{handoffs} hand-offs\n{text}");
    let exits = evs
        .iter()
        .filter(|e| e["name"] == "syscall exit" && e["args"]["goid"] == ids[0])
        .count();
    assert!(exits >= 4, "{exits} syscall exits of G{}", ids[0]);
    // Every goroutine that ran has slices, the blocked one several (one
    // before each call at least).
    for id in &ids {
        let g = format!("G{id}");
        assert!(
            evs.iter()
                .any(|e| e["ph"] == "X" && e["name"] == g.as_str()),
            "no slice for {g}"
        );
    }
}

/// A goroutine still in a syscall when the trace stops, its P handed off
/// and running other goroutines: its slice ends at the hand-off, not at
/// the stop (no two slices overlap on the P). Before h36 `stop` cut a
/// slice at its P's hand-off only at the goroutine's syscall exit, and
/// built the hand-off index only for a trace with an exit: the slice ran
/// to the stop, over the slices of the goroutines that had the P.
fn trace_stop_during_syscall() {
    let path = trace_path("stopsys");
    let o = spawn_child(
        "trace_stop_during_syscall",
        &[("GORO_TEST_TRACE", path.to_str().unwrap())],
        None,
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let blocked: u64 = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("blocked "))
        .unwrap()
        .parse()
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap();
    let g = format!("G{blocked}");
    assert!(
        evs.iter()
            .any(|e| e["ph"] == "X" && e["name"] == g.as_str()),
        "no slice for {g}"
    );
    assert!(
        evs.iter().any(|e| e["name"] == "syscall handoff"),
        "no hand-off"
    );
    assert_tracks_named_no_overlap(evs);
}

fn child_trace_stop_during_syscall() {
    use std::sync::mpsc;
    goro::start(goro::Config::from_env().max_procs(1)).unwrap();
    let path = std::env::var("GORO_TEST_TRACE").unwrap();
    let blocked = goro::run(move || {
        goro::trace::start(&path).unwrap();
        let (entered_tx, entered_rx) = goro::chan::<()>(1);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        // Runs a slice inside the trace, then blocks in a call that hands
        // its P (the only one) off at once; main, woken by the send, can
        // run only on that P.
        let h = goro::spawn(move || {
            goro::yield_now();
            entered_tx.send(()).unwrap();
            let g = goro::enter_syscall_block();
            release_rx.recv().unwrap();
            goro::exit_syscall(g);
            goro::current_id().unwrap()
        });
        entered_rx.recv().unwrap();
        // Slices of main on the P while the other goroutine is in its call.
        for _ in 0..10 {
            goro::yield_now();
        }
        goro::trace::stop().unwrap();
        release_tx.send(()).unwrap();
        h.join().unwrap()
    });
    println!("blocked {blocked}");
}

/// Set by trace_syscall_handoff's main goroutine once back from its last
/// call (Release: the runner's Acquire load then sees it returned).
static MAIN_BACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn child_trace_syscall_handoff() {
    use std::sync::mpsc;
    goro::start(goro::Config::from_env().max_procs(1)).unwrap();
    let path = std::env::var("GORO_TEST_TRACE").unwrap();
    let ids = goro::run(move || {
        goro::trace::start(&path).unwrap();
        let me = goro::current_id().unwrap();
        let mut ids = vec![me];
        // A goroutine that runs (yielding: one slice per turn) `n` turns,
        // then wakes the main goroutine's thread. It can run only once
        // the main goroutine's P was handed off: one P.
        let runner = |n: u32, tx: mpsc::Sender<()>, in_call: bool| {
            goro::spawn(move || {
                for _ in 0..n {
                    goro::yield_now();
                }
                if in_call {
                    // Wake the main goroutine from inside a call of our
                    // own and stay in it until main has returned from
                    // its call: main's exit takes the P from this call
                    // (the P it lost, now in another goroutine's
                    // syscall), so this goroutine loses it in turn.
                    goro::blocking(|| {
                        tx.send(()).unwrap();
                        let t = std::time::Instant::now();
                        // Bounded: sysmon may retake the P first.
                        while !MAIN_BACK.load(Ordering::Acquire)
                            && t.elapsed() < Duration::from_secs(1)
                        {
                            std::hint::spin_loop();
                        }
                    });
                } else {
                    tx.send(()).unwrap();
                }
                goro::current_id().unwrap()
            })
        };
        // Each phase: a yield first, so that main's slice begins inside
        // the trace.
        // 1. enter_syscall_block: the P is handed off at once.
        goro::yield_now();
        let (tx, rx) = mpsc::channel();
        let h = runner(20, tx, false);
        let g = goro::enter_syscall_block();
        rx.recv().unwrap();
        goro::exit_syscall(g);
        ids.push(h.join().unwrap());
        // 2. A guarded call that blocks: sysmon hands the P off.
        goro::yield_now();
        let (tx, rx) = mpsc::channel();
        let h = runner(20, tx, false);
        goro::blocking(|| rx.recv().unwrap());
        ids.push(h.join().unwrap());
        // 3. An unguarded one: blocking detection detaches the P.
        goro::yield_now();
        let (tx, rx) = mpsc::channel();
        let h = runner(20, tx, false);
        rx.recv().unwrap();
        ids.push(h.join().unwrap());
        // 4. A guarded call that returns while its P, handed off, is in
        // another goroutine's call.
        goro::yield_now();
        let (tx, rx) = mpsc::channel();
        let h = runner(20, tx, true);
        goro::blocking(|| rx.recv().unwrap());
        MAIN_BACK.store(true, Ordering::Release);
        ids.push(h.join().unwrap());
        goro::trace::stop().unwrap();
        ids
    });
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    println!("ids {}", ids.join(" "));
}

/// An event recorded with the previous trace's generation on a thread
/// whose chunk already holds the running trace's events — what an `emit`
/// that read the generation before a `stop` sees when its goroutine moved
/// to another thread and recorded after the next `start` (h34, found by
/// reading: `trace::start`'s own counter sample ran outside a critical
/// section). The event is dropped; the running trace keeps the thread's
/// events (before: the chunk was reset as stale and they were lost).
fn trace_stale_generation_emit() {
    let (first, path) = (trace_path("gen1"), trace_path("gen2"));
    let p = path.clone();
    let ids = common::run(move || {
        goro::trace::start(&first).unwrap();
        goro::trace::stop().unwrap();
        let _ = std::fs::remove_file(&first);
        goro::trace::start(&p).unwrap();
        // A plain thread: its events go to its own chunk, and nothing
        // else writes there.
        let t = std::thread::spawn(|| {
            let hs: Vec<_> = (0..3).map(|_| goro::spawn(|| ())).collect();
            let ids: Vec<u64> = hs.iter().map(|h| h.id()).collect();
            assert!(goro::trace::__emit_stale_generation());
            for h in hs {
                h.join().unwrap();
            }
            ids
        });
        let ids = goro::blocking(|| t.join().unwrap());
        goro::trace::stop().unwrap();
        ids
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap();
    for id in ids {
        assert!(
            evs.iter()
                .any(|e| e["name"] == "spawn" && e["args"]["goid"] == id),
            "no spawn of G{id}: the plain thread's events were lost"
        );
    }
}

/// GORO_TRACE=path: traced from runtime start, written at exit.
/// A trace started with a relative path (or `GORO_TRACE` naming one) is
/// written where that path pointed when the trace started, as Go writes
/// to the file handed to trace.Start, even if the program changes its
/// working directory before the trace is written (h45: `stop` re-created
/// the path relative to the new directory, and the file created at start
/// stayed empty).
fn trace_relative_path_chdir() {
    for env in [false, true] {
        let base = trace_path(if env { "chdir-env" } else { "chdir" });
        let (a, b) = (base.join("a"), base.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mut envs = vec![
            ("GORO_TRACE_START_DIR", a.to_str().unwrap()),
            ("GORO_TRACE_CHDIR", b.to_str().unwrap()),
        ];
        if env {
            envs.push(("GORO_TRACE", "rel.json"));
        }
        let o = spawn_child("trace_chdir", &envs, None);
        assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
        let text = std::fs::read_to_string(a.join("rel.json")).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("env {env}: {e}: {text:?} (stderr {})", o.stderr));
        assert!(doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "spawn"));
        assert!(
            !b.join("rel.json").exists(),
            "env {env}: the trace was written in the directory changed to"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// Starts in GORO_TRACE_START_DIR, traces to `rel.json` (or through
/// GORO_TRACE), changes to GORO_TRACE_CHDIR, then stops (or exits).
fn child_trace_chdir() {
    std::env::set_current_dir(std::env::var("GORO_TRACE_START_DIR").unwrap()).unwrap();
    let env = std::env::var_os("GORO_TRACE").is_some();
    goro::run(move || {
        if !env {
            goro::trace::start("rel.json").unwrap();
        }
        goro::spawn(|| 1).join().unwrap();
        std::env::set_current_dir(std::env::var("GORO_TRACE_CHDIR").unwrap()).unwrap();
        if !env {
            goro::trace::stop().unwrap();
        }
    });
}

fn trace_env() {
    let path = trace_path("env");
    let o = spawn_child("trace_env", &[("GORO_TRACE", path.to_str().unwrap())], None);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let line = o.stdout.lines().find(|l| l.starts_with("ids ")).unwrap();
    let ids: Vec<u64> = line[4..].split(' ').map(|x| x.parse().unwrap()).collect();
    let evs = check_trace(&path, &ids);
    assert!(evs
        .iter()
        .any(|e| e["name"] == "spawn" && e["args"]["goid"] == ids[1]));
    let _ = std::fs::remove_file(&path);
}
