//! goro::signal: Go's os/signal Notify/Stop (signal_test.go's TestSignal,
//! TestStop and TestNotifyContextNotifyWaitSignal shapes, reduced to what
//! holds deterministically).
//!
//! Each test uses its own signal: libtest runs tests on parallel threads of
//! one process, and dispositions are per process. `libc::raise` sends to
//! the calling thread, so a handler has run when it returns; the relay
//! goroutine then delivers asynchronously (`recv` waits for it).

mod common;
use common::run;

use goro::signal::{self, Signal};
use goro::{chan, TryRecvError};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

fn raise(s: Signal) {
    // SAFETY: raising a signal that has a handler (goro's or the test's).
    assert_eq!(unsafe { libc::raise(s.as_raw()) }, 0);
}

/// The current handler address of `s` (SIG_DFL is 0, SIG_IGN 1).
fn disposition(s: Signal) -> usize {
    // SAFETY: querying only (null new action).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(s.as_raw(), std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

/// TestSignal: a relayed signal arrives on the channel, every time.
#[test]
fn notify_relays_a_signal() {
    run(|| {
        assert_eq!(disposition(Signal::SIGUSR1), libc::SIG_DFL);
        let (tx, rx) = chan(1);
        signal::notify(&tx, &[Signal::SIGUSR1]).unwrap();
        for _ in 0..5 {
            raise(Signal::SIGUSR1);
            assert_eq!(rx.recv(), Ok(Signal::SIGUSR1));
        }
        signal::stop(&tx);
        // SIGUSR1's default action (termination) is back.
        assert_eq!(disposition(Signal::SIGUSR1), libc::SIG_DFL);
    });
}

/// Several channels relay one signal: each gets it, and a full one does
/// not hold up the others (delivery never blocks). Stopping one leaves
/// the other relaying.
#[test]
fn every_channel_relaying_a_signal_gets_it() {
    run(|| {
        let (tx1, rx1) = chan(1);
        let (tx2, rx2) = chan(1);
        let (full, full_rx) = chan(1);
        full.send(Signal::SIGHUP).unwrap();
        signal::notify(&tx1, &[Signal::SIGUSR2]).unwrap();
        signal::notify(&full, &[Signal::SIGUSR2]).unwrap();
        // A second notify of the same channel (a clone) adds to it.
        signal::notify(&tx2.clone(), &[Signal::SIGUSR2]).unwrap();
        raise(Signal::SIGUSR2);
        assert_eq!(rx1.recv(), Ok(Signal::SIGUSR2));
        assert_eq!(rx2.recv(), Ok(Signal::SIGUSR2));
        signal::stop(&tx1);
        raise(Signal::SIGUSR2);
        assert_eq!(rx2.recv(), Ok(Signal::SIGUSR2));
        // stop has returned: tx1's channel gets nothing more.
        assert_eq!(rx1.try_recv(), Err(TryRecvError::Empty));
        // The full channel kept its one value; the signals were dropped.
        assert_eq!(full_rx.try_recv(), Ok(Signal::SIGHUP));
        assert_eq!(full_rx.try_recv(), Err(TryRecvError::Empty));
        signal::stop(&tx2);
        signal::stop(&full);
        assert_eq!(disposition(Signal::SIGUSR2), libc::SIG_DFL);
    });
}

static PREV_HANDLER_CALLS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn counting_handler(_: libc::c_int) {
    PREV_HANDLER_CALLS.fetch_add(1, SeqCst);
}

/// TestStop: after stop the signal goes where it went before notify (here
/// a handler of the program's own), and the channel gets nothing.
#[test]
fn stop_restores_the_previous_handler() {
    run(|| {
        // SAFETY: an async-signal-safe handler (one atomic add).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = counting_handler as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGWINCH, &sa, std::ptr::null_mut()),
                0
            );
        }
        let (tx, rx) = chan(4);
        signal::notify(&tx, &[Signal::SIGWINCH]).unwrap();
        raise(Signal::SIGWINCH);
        assert_eq!(rx.recv(), Ok(Signal::SIGWINCH));
        assert_eq!(PREV_HANDLER_CALLS.load(SeqCst), 0, "relayed, not passed on");
        signal::stop(&tx);
        signal::stop(&tx); // a second stop is a no-op
        raise(Signal::SIGWINCH);
        assert_eq!(
            PREV_HANDLER_CALLS.load(SeqCst),
            1,
            "the old handler is back"
        );
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(
            disposition(Signal::SIGWINCH),
            counting_handler as extern "C" fn(libc::c_int) as usize
        );
    });
}

/// Signals no handler can relay are an error, and change nothing.
#[test]
fn notify_rejects_signals_it_cannot_relay() {
    let (tx, _rx) = chan::<Signal>(1);
    for bad in [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGURG,
        0,
        65,
        -1,
    ] {
        let before = disposition(Signal::SIGALRM);
        let e = signal::notify(&tx, &[Signal::SIGALRM, Signal::from_raw(bad)]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {e}");
        assert_eq!(
            disposition(Signal::SIGALRM),
            before,
            "{bad}: nothing installed"
        );
    }
    let e = signal::notify(&tx, &[]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(Signal::SIGTERM.to_string(), "SIGTERM");
    assert_eq!(Signal::from_raw(40).to_string(), "signal 40");
}

const CHILD_ENV: &str = "GORO_SIGNAL_TEST_CHILD";

/// Runs `body` when this process is the child re-executed for `name`.
fn in_child(name: &str, body: impl FnOnce()) -> bool {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body();
        return true;
    }
    false
}

/// A server's graceful shutdown: the child relays SIGTERM and SIGINT,
/// says it is ready, and exits normally when the parent's SIGTERM
/// arrives (without notify, SIGTERM would kill it).
#[test]
fn sigterm_reaches_a_waiting_program() {
    const NAME: &str = "sigterm_reaches_a_waiting_program";
    if in_child(NAME, || {
        goro::run(|| {
            let (tx, rx) = chan(1);
            signal::notify(&tx, &[Signal::SIGTERM, Signal::SIGINT]).unwrap();
            println!("<child ready>");
            let s = rx.recv().unwrap();
            println!("got {s}");
        })
    }) {
        return;
    }
    let mut child = common::self_test_command(NAME)
        .env(CHILD_ENV, NAME)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // libtest prints "test NAME ... " before the child's own output.
    while !line.contains("<child ready>") {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "child exited early");
    }
    // SAFETY: signalling our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}, output: {rest}");
    assert!(rest.contains("got SIGTERM"), "{rest}");
}

/// After stop, SIGTERM's default action applies again: the child dies by
/// the signal it raises.
#[test]
fn sigterm_kills_again_after_stop() {
    const NAME: &str = "sigterm_kills_again_after_stop";
    if in_child(NAME, || {
        goro::run(|| {
            let (tx, _rx) = chan(1);
            signal::notify(&tx, &[Signal::SIGTERM]).unwrap();
            signal::stop(&tx);
            raise(Signal::SIGTERM);
            println!("survived");
        })
    }) {
        return;
    }
    assert_child_dies_by(NAME, libc::SIGTERM);
}

/// SIGQUIT relayed from a program that has not started the runtime yet:
/// notify starts it first, so the relay replaces goro's dump handler (the
/// runtime's start does not replace the relay), and stop gives the dump
/// back: the second SIGQUIT prints it and exits with status 2, as in Go
/// (`GOTRACEBACK=all` turns the dump on).
#[test]
fn sigquit_relay_replaces_the_dump_until_stop() {
    const NAME: &str = "sigquit_relay_replaces_the_dump_until_stop";
    if in_child(NAME, || {
        let (tx, rx) = chan(1);
        signal::notify(&tx, &[Signal::SIGQUIT]).unwrap();
        raise(Signal::SIGQUIT);
        assert_eq!(rx.recv(), Ok(Signal::SIGQUIT));
        signal::stop(&tx);
        println!("<relayed>");
        raise(Signal::SIGQUIT);
        // The dump thread ends the process.
        loop {
            std::thread::park();
        }
    }) {
        return;
    }
    let out = common::self_test_command(NAME)
        .env(CHILD_ENV, NAME)
        .env("GOTRACEBACK", "all") // turns the SIGQUIT dump on
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{:?}: {stdout} {stderr}",
        out.status
    );
    assert!(stdout.contains("<relayed>"), "{stdout}");
    assert!(stderr.contains("SIGQUIT: quit"), "{stderr}");
}

/// A program started with signals blocked (by a supervisor, or a parent
/// that blocked them: the mask survives exec), so that every thread it
/// has, libtest's included, inherits the block. Go's signal M unblocks
/// every relayed signal on its thread; so does goro's relay goroutine: the
/// kill reaches the channel. After stop, the signal is blocked there again
/// before its default action (death) comes back, so a later kill stays
/// pending and the process lives, while another channel still gets its
/// own signal.
#[test]
fn notify_unblocks_a_signal_blocked_at_start() {
    const NAME: &str = "notify_unblocks_a_signal_blocked_at_start";
    let kill_self = |s: Signal| {
        // SAFETY: a process-directed signal to ourselves.
        assert_eq!(unsafe { libc::kill(libc::getpid(), s.as_raw()) }, 0);
    };
    if in_child(NAME, || {
        goro::run(move || {
            let wait = std::time::Duration::from_secs(20);
            let (tx1, rx1) = chan(1);
            let (tx2, rx2) = chan(1);
            signal::notify(&tx1, &[Signal::SIGUSR1]).unwrap();
            signal::notify(&tx2, &[Signal::SIGUSR2]).unwrap();
            kill_self(Signal::SIGUSR1);
            assert_eq!(rx1.recv_timeout(wait), Ok(Signal::SIGUSR1));
            signal::stop(&tx1);
            // SIGUSR1's default action is back, and it is blocked on every
            // thread again: this one stays pending.
            assert_eq!(disposition(Signal::SIGUSR1), libc::SIG_DFL);
            kill_self(Signal::SIGUSR1);
            kill_self(Signal::SIGUSR2);
            assert_eq!(rx2.recv_timeout(wait), Ok(Signal::SIGUSR2));
            // SAFETY: sigpending fills a zeroed set.
            let pending = unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                assert_eq!(libc::sigpending(&mut set), 0);
                libc::sigismember(&set, libc::SIGUSR1) == 1
            };
            assert!(pending, "SIGUSR1 not pending after stop");
            assert_eq!(rx1.try_recv(), Err(TryRecvError::Empty));
            println!("<blocked-signal-relayed>");
        });
    }) {
        return;
    }
    let mut cmd = common::self_test_command(NAME);
    cmd.env(CHILD_ENV, NAME);
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only
    // async-signal-safe functions (sigemptyset, sigaddset,
    // pthread_sigmask) on a local set; std has already reset the mask,
    // so this block is what the child starts with.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("<blocked-signal-relayed>"),
        "{:?}: {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A notify that fails (here: the relay goroutine's stack cannot be
/// mapped) changes nothing: the signal keeps its default action, so the
/// child dies by the SIGUSR2 it raises (h27: goro's handler stayed
/// installed with no relay running, and the signal was swallowed).
#[test]
fn failed_notify_changes_nothing() {
    const NAME: &str = "failed_notify_changes_nothing";
    if in_child(NAME, || {
        goro::run(|| {
            let (tx, _rx) = chan(1);
            goro::__private::fail_stack_allocs(1);
            let r = signal::notify(&tx, &[Signal::SIGUSR2]);
            assert!(r.is_err(), "{r:?}");
            raise(Signal::SIGUSR2);
            println!("survived");
        })
    }) {
        return;
    }
    assert_child_dies_by(NAME, libc::SIGUSR2);
}

/// Runs this test binary's child `name` and checks that it died by `sig`.
fn assert_child_dies_by(name: &str, sig: i32) {
    let out = common::self_test_command(name)
        .env(CHILD_ENV, name)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(sig),
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
