//! API-level tests of the contract in docs/API.md (shared spec): the runtime
//! entry points, goroutine handles and ids, Builder, stats, and the channel
//! ends with their error values, drop semantics, timeouts, iterators and use
//! from plain OS threads.

mod common;
use common::{run, scale};

use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goro::{
    chan, RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};

/// Gives other goroutines a chance to run; used only before asserting that
/// something has *not* happened or to make an interleaving likely, never to
/// order events.
fn let_others_run() {
    for _ in 0..8 {
        goro::yield_now();
    }
    goro::time::sleep(Duration::from_millis(1));
}

/// Counts drops of values that went through a channel.
struct Counted(Arc<AtomicUsize>, u32);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string payload>".to_string()
    }
}

// ---------------------------------------------------------------------------
// Runtime entry points.

#[test]
fn run_returns_value() {
    let _w = common::watchdog();
    assert_eq!(goro::run(|| 42), 42);
    assert_eq!(goro::run(|| String::from("x") + "y"), "xy");
}

#[test]
fn run_resumes_panic_on_caller() {
    let _w = common::watchdog();
    let r = std::panic::catch_unwind(|| goro::run(|| -> i32 { panic!("boom in run") }));
    let p = r.expect_err("panic in run's closure must reach the caller");
    assert_eq!(panic_message(&*p), "boom in run");
    // The runtime is still usable afterwards.
    assert_eq!(goro::run(|| 1), 1);
}

#[test]
fn run_from_many_threads_at_once() {
    let _w = common::watchdog();
    let ts: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                goro::run(move || {
                    let hs: Vec<_> = (0..10).map(|j| goro::spawn(move || i * 100 + j)).collect();
                    hs.into_iter().map(|h| h.join().unwrap()).sum::<usize>()
                })
            })
        })
        .collect();
    for (i, t) in ts.into_iter().enumerate() {
        assert_eq!(t.join().unwrap(), i * 1000 + 45);
    }
}

#[test]
fn run_with_and_config_setters() {
    let _w = common::watchdog();
    // Builder-style setters exist; this config is not applied (the runtime
    // may already be running) — only its shape is checked.
    let base = goro::Config::from_env();
    let c = base
        .clone()
        .max_procs(2)
        .stack_size(512 * 1024)
        .preempt(false)
        .time_slice(std::time::Duration::from_millis(3))
        .detect_blocking(false);
    assert_eq!(c.max_procs, 2);
    assert_eq!(c.stack_size, 512 * 1024);
    assert!(!c.preempt);
    assert_eq!(c.time_slice, std::time::Duration::from_millis(3));
    assert!(!c.detect_blocking);
    // Fields the setters did not touch keep their values.
    assert_eq!(c.preempt_mode, base.preempt_mode);
    assert_eq!(c.schedtrace_ms, base.schedtrace_ms);
    assert!(c.validate().is_ok());
    assert!(base.clone().stack_size(1).validate().is_err());
    assert_eq!(goro::run_with(goro::Config::from_env(), || 7), 7);
}

/// GODEBUG's integer knobs read as Go reads them (runtime1.go
/// parsegodebug): a value that is not an integer is ignored, keeping an
/// earlier setting of the key (GODEBUG is often extended as
/// `GODEBUG=$GODEBUG,key=value`); `asyncpreemptoff` is off for any
/// nonzero value and `scheddetail` on for any positive one. Before h45
/// `asyncpreemptoff=2` left async preemption on, `scheddetail=2` left the
/// detail off, and `schedtrace=x` cleared an earlier `schedtrace=1000`.
/// In a child, whose environment the test sets.
#[test]
fn godebug_integer_knobs_follow_go() {
    let _w = common::watchdog();
    const ENV: &str = "GORO_API_GODEBUG_CHILD";
    if std::env::var_os(ENV).is_some() {
        let c = goro::Config::from_env();
        assert!(!c.preempt, "asyncpreemptoff=2 left async preemption on");
        assert!(c.scheddetail, "scheddetail=2 left the detail off");
        assert_eq!(c.schedtrace_ms, 1000, "schedtrace=x was not ignored");
        assert!(c.validate().is_ok());
        return;
    }
    let out = common::self_test_command("godebug_integer_knobs_follow_go")
        .env(ENV, "1")
        .env(
            "GODEBUG",
            "schedtrace=1000,scheddetail=2,asyncpreemptoff=2,schedtrace=x",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GOTRACEBACK`'s numeric levels are Go's synonyms ("for historical
/// reasons, the GOTRACEBACK settings 0, 1, and 2 are synonyms for none,
/// all, and system"): 1 asks for every goroutine, so it turns on the
/// SIGQUIT dump as `all` and `2` do, and 0 does not. Before h45 only `2`
/// was taken. In children, whose environment the test sets.
#[test]
fn gotraceback_numeric_levels_follow_go() {
    let _w = common::watchdog();
    const ENV: &str = "GORO_API_GOTRACEBACK_CHILD";
    if let Ok(want) = std::env::var(ENV) {
        let c = goro::Config::from_env();
        assert_eq!(
            c.dump_on_sigquit.to_string(),
            want,
            "GOTRACEBACK={:?}",
            std::env::var("GOTRACEBACK")
        );
        return;
    }
    for (level, want) in [("1", true), ("2", true), ("0", false), ("all", true)] {
        let out = common::self_test_command("gotraceback_numeric_levels_follow_go")
            .env(ENV, want.to_string())
            .env("GOTRACEBACK", level)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "GOTRACEBACK={level}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// go!/spawn outside run start the runtime; join blocks the plain thread.
#[test]
fn spawn_from_plain_thread() {
    let _w = common::watchdog();
    let h = goro::spawn(|| goro::current_id().is_some());
    assert!(h.join().unwrap());
    let h = goro::go!(|| 5 * 5);
    assert_eq!(h.join().unwrap(), 25);
    let t = std::thread::spawn(|| goro::go!(|| 3).join().unwrap());
    assert_eq!(t.join().unwrap(), 3);
}

// ---------------------------------------------------------------------------
// Goroutines.

#[test]
fn join_returns_value() {
    let _w = common::watchdog();
    run(|| {
        let h = goro::spawn(|| vec![1, 2, 3]);
        assert_eq!(h.join().unwrap(), vec![1, 2, 3]);
        let h = goro::go!(move || "from go!");
        assert_eq!(h.join().unwrap(), "from go!");
        // A large return value.
        let h = goro::spawn(|| [7u8; 16 * 1024]);
        assert!(h.join().unwrap().iter().all(|&b| b == 7));
    });
}

#[test]
fn join_returns_err_payload_on_panic() {
    let _w = common::watchdog();
    run(|| {
        let h = goro::spawn(|| -> i32 { panic!("static message") });
        assert_eq!(panic_message(&*h.join().unwrap_err()), "static message");
        let h = goro::spawn(|| -> i32 { panic!("formatted {}", 42) });
        assert_eq!(panic_message(&*h.join().unwrap_err()), "formatted 42");
        let h = goro::spawn(|| std::panic::panic_any(1234u32));
        assert_eq!(h.join().unwrap_err().downcast_ref::<u32>(), Some(&1234));
        // Destructors run while unwinding the goroutine's stack.
        let drops = Arc::new(AtomicUsize::new(0));
        let d = drops.clone();
        let h = goro::spawn(move || {
            let _a = Counted(d.clone(), 0);
            let _b = Counted(d, 1);
            panic!("unwind");
        });
        assert!(h.join().is_err());
        assert_eq!(drops.load(SeqCst), 2);
        // The runtime keeps working after panics.
        assert_eq!(goro::spawn(|| 1).join().unwrap(), 1);
    });
}

/// A panic in a detached goroutine does not take the runtime down.
#[test]
fn detached_panic_is_contained() {
    let _w = common::watchdog();
    run(|| {
        let h = goro::spawn(|| panic!("detached"));
        let mut spins = 0;
        while !h.is_finished() {
            goro::yield_now();
            spins += 1;
            assert!(spins < 10_000_000, "panicking goroutine never finished");
        }
        drop(h);
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || tx.send(1).unwrap());
        assert_eq!(rx.recv(), Ok(1));
        h.join().unwrap();
    });
}

#[test]
fn is_finished() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<()>(0);
        let h = goro::spawn(move || rx.recv());
        let_others_run();
        assert!(!h.is_finished(), "blocked goroutine reported finished");
        tx.send(()).unwrap();
        let mut spins = 0;
        while !h.is_finished() {
            goro::yield_now();
            spins += 1;
            assert!(spins < 10_000_000, "goroutine never reported finished");
        }
        assert_eq!(h.join().unwrap(), Ok(()));
    });
}

#[test]
fn ids_unique_and_match_current_id() {
    let _w = common::watchdog();
    run(|| {
        let me = goro::current_id().expect("current_id in a goroutine");
        let n = scale(1000);
        // Spawned concurrently from 8 spawners.
        let spawners: Vec<_> = (0..8)
            .map(|_| {
                goro::spawn(move || {
                    let hs: Vec<_> = (0..n / 8)
                        .map(|_| goro::spawn(|| goro::current_id().unwrap()))
                        .collect();
                    hs.into_iter()
                        .map(|h| {
                            let id = h.id();
                            (id, h.join().unwrap())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seen = HashSet::new();
        seen.insert(me);
        for s in spawners {
            let spawner_id = s.id();
            assert!(seen.insert(spawner_id), "duplicate id {spawner_id}");
            for (handle_id, inner_id) in s.join().unwrap() {
                assert_eq!(handle_id, inner_id, "JoinHandle::id != current_id inside");
                assert!(seen.insert(handle_id), "duplicate id {handle_id}");
            }
        }
        assert_eq!(seen.len(), 1 + 8 + 8 * (n / 8));
        assert_eq!(goro::current_id(), Some(me), "current_id changed");
    });
}

#[test]
fn current_id_none_on_plain_threads() {
    let _w = common::watchdog();
    assert_eq!(goro::current_id(), None);
    let id = goro::run(goro::current_id);
    assert!(id.is_some());
    // Back on the plain thread after run.
    assert_eq!(goro::current_id(), None);
    // A std thread started from inside a goroutine is a plain thread.
    let inner = goro::run(|| std::thread::spawn(goro::current_id).join().unwrap());
    assert_eq!(inner, None);
}

#[test]
fn num_goroutine_counts_parked_goroutines() {
    let _w = common::watchdog();
    run(|| {
        assert!(goro::num_goroutine() >= 1);
        let (tx, rx) = chan::<()>(0);
        let hs: Vec<_> = (0..50)
            .map(|_| {
                let rx = rx.clone();
                goro::spawn(move || rx.recv())
            })
            .collect();
        // Other tests of this binary run concurrently: only a lower bound.
        assert!(goro::num_goroutine() >= 51);
        drop(tx);
        for h in hs {
            assert_eq!(h.join().unwrap(), Err(RecvError));
        }
    });
    let _ = goro::num_goroutine(); // callable from a plain thread
}

#[test]
fn builder_name_and_stack_size() {
    let _w = common::watchdog();
    run(|| {
        let h = goro::Builder::new()
            .name(String::from("worker-1"))
            .stack_size(512 * 1024)
            .spawn(|| goro::current_id().is_some())
            .expect("Builder::spawn");
        assert!(h.join().unwrap());
        let h = goro::Builder::new().spawn(|| 11).unwrap();
        assert_eq!(h.join().unwrap(), 11);
        // A panicking named goroutine still reports through join.
        let h = goro::Builder::new()
            .name(String::from("doomed"))
            .spawn(|| -> () { panic!("named panic") })
            .unwrap();
        assert_eq!(panic_message(&*h.join().unwrap_err()), "named panic");
    });
    // From a plain thread.
    let h = goro::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| 3)
        .unwrap();
    assert_eq!(h.join().unwrap(), 3);
}

/// JoinHandle packets come from per-P magazines traded through a depot
/// when they fit a 64-byte block, and from the allocator when not. Many
/// goroutines per size, joined from other goroutines (so packets are
/// freed on other Ps than their spawners') or dropped unjoined before and
/// after the goroutine ends: every result arrives intact (a block reused
/// while live would corrupt one) and every result is dropped exactly once.
#[test]
fn join_packets_pooled_and_unpooled() {
    let _w = common::watchdog();
    #[derive(Clone, Copy, PartialEq, Debug)]
    #[repr(align(32))]
    struct Aligned32(u64);
    struct Counted2(Arc<AtomicUsize>, u64, [u64; 2]);
    impl Drop for Counted2 {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let n = scale(10_000) as u64;
    run(move || {
        // Pooled (fits 64 bytes): (), u64, [u64; 3].
        let hs: Vec<_> = (0..n)
            .map(|i| goro::spawn(move || [i, i + 1, i + 2]))
            .collect();
        let checker = goro::spawn(move || {
            for (i, h) in (0..).zip(hs) {
                assert_eq!(h.join().unwrap(), [i, i + 1, i + 2]);
            }
        });
        checker.join().unwrap();
        let hs: Vec<_> = (0..n).map(|_| goro::spawn(|| ())).collect();
        for h in hs.into_iter().rev() {
            h.join().unwrap();
        }
        // Unpooled: too big, and over-aligned.
        let hs: Vec<_> = (0..n / 4).map(|i| goro::spawn(move || [i; 16])).collect();
        for (i, h) in (0..).zip(hs) {
            assert_eq!(h.join().unwrap(), [i; 16]);
        }
        let hs: Vec<_> = (0..n / 4)
            .map(|i| goro::spawn(move || Aligned32(i)))
            .collect();
        for (i, h) in (0..).zip(hs) {
            assert_eq!(h.join().unwrap(), Aligned32(i));
        }
        // Drops: joined, dropped unjoined while the goroutine may still
        // run (the goroutine frees the packet), and dropped after it ended
        // (the handle frees it), panicked ones included.
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::<()>(0);
        let mut joined = 0u64;
        let mut hs = Vec::new();
        for i in 0..n {
            let d = drops.clone();
            let rx = rx.clone();
            let h = goro::spawn(move || {
                if i % 3 == 1 {
                    let _ = rx.recv(); // ends when tx is dropped
                }
                if i % 701 == 0 {
                    panic!("planned"); // a few: each report is printed
                }
                Counted2(d, i, [i; 2])
            });
            match i % 3 {
                0 => hs.push(h),
                _ => drop(h),
            }
        }
        drop(rx);
        drop(tx); // the i % 3 == 1 goroutines end now, their handles gone
        for h in hs {
            match h.join() {
                Ok(c) => {
                    assert_eq!((c.2[0], c.2[1]), (c.1, c.1));
                    joined += 1;
                }
                Err(p) => assert_eq!(panic_message(&*p), "planned"),
            }
        }
        let produced = (0..n).filter(|i| i % 701 != 0).count();
        // The unjoined ones are dropped by their goroutines or handles, all
        // of which have run or been dropped once their goroutines ended.
        while goro::num_goroutine() > 1 {
            let_others_run();
        }
        assert!(joined > 0);
        assert_eq!(drops.load(SeqCst), produced);
    });
}

/// Handles can be moved to and joined from other goroutines and plain threads.
#[test]
fn join_from_other_goroutine_and_thread() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(0);
        let a = goro::spawn(move || rx.recv().unwrap() * 2);
        let b = goro::spawn(move || a.join().unwrap() + 1);
        let c = goro::spawn(move || b.join().unwrap() + 1);
        let t = std::thread::spawn(move || c.join().unwrap());
        tx.send(20).unwrap();
        assert_eq!(t.join().unwrap(), 42);
    });
}

#[test]
fn stats_fields() {
    let _w = common::watchdog();
    run(|| {
        let s = goro::stats();
        // api.rs never changes GOMAXPROCS.
        assert_eq!(s.gomaxprocs as usize, goro::max_procs());
        assert_eq!(s.local_runq.len(), s.gomaxprocs as usize);
        assert!(s.idle_procs as usize <= s.gomaxprocs as usize);
        assert!(s.threads as usize >= 1);
        assert!(s.goroutines as usize >= 1);
        assert!(s.stacks_reserved as usize >= 1);
        let _ = (s.spinning_threads, s.idle_threads, s.global_runq);
        let before = s.syscalls_handed_off;
        goro::blocking(|| std::hint::black_box(1));
        let s2 = goro::stats();
        assert!(s2.syscalls_handed_off >= before, "counters only grow");
    });
}

#[test]
fn handles_and_ends_are_send_sync_clone() {
    let _w = common::watchdog();
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync_clone::<goro::Sender<String>>();
    send_sync_clone::<goro::Receiver<String>>();
    send::<goro::JoinHandle<String>>();
}

// ---------------------------------------------------------------------------
// Channels: errors carry the value back.

#[test]
fn send_on_closed_returns_value() {
    let _w = common::watchdog();
    run(|| {
        for cap in [0usize, 1, 4] {
            let (tx, rx) = chan::<String>(cap);
            tx.close();
            match tx.send(String::from("payload")) {
                Err(SendError(v)) => assert_eq!(v, "payload"),
                Ok(()) => panic!("chan[{cap}]: send on closed channel succeeded"),
            }
            assert_eq!(rx.recv(), Err(RecvError));
        }
    });
}

#[test]
fn try_send_full_and_closed() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<String>(1);
        assert!(tx.try_send("a".into()).is_ok());
        match tx.try_send("b".into()) {
            Err(TrySendError::Full(v)) => assert_eq!(v, "b"),
            _ => panic!("expected Full(b)"),
        }
        tx.close();
        match tx.try_send("c".into()) {
            Err(TrySendError::Closed(v)) => assert_eq!(v, "c"),
            _ => panic!("expected Closed(c)"),
        }
        assert_eq!(rx.recv().as_deref(), Ok("a"));

        // Unbuffered without a waiting receiver: Full.
        let (tx, rx) = chan::<i32>(0);
        assert!(matches!(tx.try_send(1), Err(TrySendError::Full(1))));
        // With a parked receiver: succeeds (retry until the receiver parks).
        let h = goro::spawn(move || rx.recv());
        let mut v = 2;
        loop {
            match tx.try_send(v) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    v = back;
                    goro::yield_now();
                }
                Err(TrySendError::Closed(_)) => panic!("Closed on open channel"),
            }
        }
        assert_eq!(h.join().unwrap(), Ok(2));
    });
}

#[test]
fn try_recv_empty_and_closed() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(2);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        tx.send(1).unwrap();
        assert!(matches!(rx.try_recv(), Ok(1)));
        tx.send(2).unwrap();
        tx.close();
        assert!(matches!(rx.try_recv(), Ok(2)));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Closed)));
        // Unbuffered: a parked sender's value can be taken with try_recv.
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || tx.send(9));
        let got = loop {
            match rx.try_recv() {
                Ok(v) => break v,
                Err(TryRecvError::Empty) => goro::yield_now(),
                Err(TryRecvError::Closed) => panic!("closed before the value was taken"),
            }
        };
        assert_eq!(got, 9);
        assert!(h.join().unwrap().is_ok());
    });
}

#[test]
fn recv_after_close_drains_then_errs() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(5);
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        tx.close();
        assert!(rx.is_closed() && tx.is_closed());
        assert_eq!((rx.len(), tx.len()), (3, 3));
        for i in 0..3 {
            assert_eq!(rx.recv(), Ok(i));
        }
        assert_eq!(rx.recv(), Err(RecvError));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Closed)));
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(RecvTimeoutError::Closed)
        ));
    });
}

#[test]
fn close_is_idempotent_len_capacity() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(3);
        assert_eq!((tx.capacity(), rx.capacity()), (3, 3));
        assert!(!tx.is_closed() && !rx.is_closed());
        tx.send(1).unwrap();
        assert_eq!((tx.len(), rx.len()), (1, 1));
        tx.close();
        tx.close();
        tx.clone().close();
        assert!(tx.is_closed() && rx.is_closed());
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.len(), 0);
        let (tx0, rx0) = chan::<i32>(0);
        assert_eq!((tx0.capacity(), rx0.capacity(), tx0.len()), (0, 0, 0));
    });
}

#[test]
fn drop_last_sender_closes() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(4);
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        drop(tx);
        assert!(!rx.is_closed(), "a Sender clone is still alive");
        tx2.send(2).unwrap();
        drop(tx2);
        assert!(rx.is_closed());
        assert_eq!(rx.iter().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(rx.recv(), Err(RecvError));

        // A receiver blocked in another goroutine wakes with Err.
        let (tx, rx) = chan::<i32>(0);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                goro::spawn(move || rx.recv())
            })
            .collect();
        let_others_run();
        let tx_other = tx.clone();
        let h = goro::spawn(move || drop(tx_other));
        h.join().unwrap();
        drop(tx);
        for h in hs {
            assert_eq!(h.join().unwrap(), Err(RecvError));
        }
    });
}

#[test]
fn drop_last_receiver_fails_sends_and_drops_buffered() {
    let _w = common::watchdog();
    run(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::<Counted>(5);
        for i in 0..3 {
            assert!(tx.send(Counted(drops.clone(), i)).is_ok());
        }
        let rx2 = rx.clone();
        drop(rx);
        assert_eq!(drops.load(SeqCst), 0, "a Receiver clone is still alive");
        assert!(tx.send(Counted(drops.clone(), 3)).is_ok());
        drop(rx2);
        assert_eq!(
            drops.load(SeqCst),
            4,
            "buffered values dropped with the last Receiver"
        );
        // Further sends fail and hand the value back undropped.
        match tx.send(Counted(drops.clone(), 10)) {
            Err(SendError(v)) => {
                assert_eq!(v.1, 10);
                assert_eq!(drops.load(SeqCst), 4);
            }
            Ok(()) => panic!("send succeeded with no Receiver"),
        }
        assert_eq!(drops.load(SeqCst), 5);
        match tx.try_send(Counted(drops.clone(), 11)) {
            Err(TrySendError::Closed(v)) => assert_eq!(v.1, 11),
            _ => panic!("try_send: expected Closed"),
        }
        match tx.send_timeout(Counted(drops.clone(), 12), Duration::from_secs(10)) {
            Err(SendTimeoutError::Closed(v)) => assert_eq!(v.1, 12),
            _ => panic!("send_timeout: expected Closed"),
        }
        assert_eq!(drops.load(SeqCst), 7);
    });
}

/// A sender blocked on an unbuffered channel gets its value back when the
/// last Receiver is dropped.
#[test]
fn blocked_sender_fails_when_last_receiver_dropped() {
    let _w = common::watchdog();
    run(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::<Counted>(0);
        let d = drops.clone();
        let h = goro::spawn(move || match tx.send(Counted(d, 77)) {
            Err(SendError(v)) => v.1,
            Ok(()) => 0,
        });
        let_others_run();
        drop(rx);
        assert_eq!(h.join().unwrap(), 77);
        assert_eq!(drops.load(SeqCst), 1); // dropped once, by the sender
    });
}

/// Dropping both ends drops the buffered values exactly once.
#[test]
fn dropping_channel_drops_buffered_values() {
    let _w = common::watchdog();
    run(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::<Counted>(8);
        for i in 0..5 {
            assert!(tx.send(Counted(drops.clone(), i)).is_ok());
        }
        drop(tx); // closes; values stay buffered for the receiver
        assert_eq!(drops.load(SeqCst), 0);
        drop(rx.recv().unwrap());
        assert_eq!(drops.load(SeqCst), 1);
        drop(rx);
        assert_eq!(drops.load(SeqCst), 5);
    });
}

// ---------------------------------------------------------------------------
// Timeouts.

#[test]
fn send_timeout_cases() {
    let _w = common::watchdog();
    run(|| {
        let d = Duration::from_millis(30);
        // Full: times out (no earlier than d) with the value.
        let (tx, rx) = chan::<i32>(1);
        tx.send(0).unwrap();
        let start = Instant::now();
        match tx.send_timeout(1, d) {
            Err(SendTimeoutError::Timeout(v)) => assert_eq!(v, 1),
            _ => panic!("expected Timeout(1)"),
        }
        assert!(start.elapsed() >= d);
        // Room: succeeds.
        assert_eq!(rx.recv(), Ok(0));
        assert!(tx.send_timeout(2, d).is_ok());
        assert_eq!(rx.recv(), Ok(2));
        // A receiver arrives: succeeds long before the timeout.
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || rx.recv());
        assert!(tx.send_timeout(3, Duration::from_secs(30)).is_ok());
        assert_eq!(h.join().unwrap(), Ok(3));
        // Closed while blocked: Closed with the value, not Timeout.
        let (tx, _rx) = chan::<i32>(0);
        let tx2 = tx.clone();
        let h = goro::spawn(move || tx2.send_timeout(4, Duration::from_secs(30)));
        let_others_run();
        tx.close();
        match h.join().unwrap() {
            Err(SendTimeoutError::Closed(v)) => assert_eq!(v, 4),
            _ => panic!("expected Closed(4)"),
        }
    });
}

#[test]
fn recv_timeout_cases() {
    let _w = common::watchdog();
    run(|| {
        let d = Duration::from_millis(30);
        let (tx, rx) = chan::<i32>(1);
        let start = Instant::now();
        assert!(matches!(rx.recv_timeout(d), Err(RecvTimeoutError::Timeout)));
        assert!(start.elapsed() >= d);
        tx.send(5).unwrap();
        assert!(matches!(rx.recv_timeout(d), Ok(5)));
        // A sender arrives.
        let tx2 = tx.clone();
        let h = goro::spawn(move || tx2.send(6));
        assert!(matches!(rx.recv_timeout(Duration::from_secs(30)), Ok(6)));
        assert!(h.join().unwrap().is_ok());
        // Closed while blocked.
        let rx2 = rx.clone();
        let h = goro::spawn(move || rx2.recv_timeout(Duration::from_secs(30)));
        let_others_run();
        tx.close();
        assert!(matches!(h.join().unwrap(), Err(RecvTimeoutError::Closed)));
    });
}

#[test]
fn timeouts_on_plain_thread() {
    let _w = common::watchdog();
    let (tx, rx) = chan::<i32>(0);
    let t = std::thread::spawn(move || {
        let d = Duration::from_millis(20);
        let start = Instant::now();
        let r = rx.recv_timeout(d);
        assert!(start.elapsed() >= d);
        matches!(r, Err(RecvTimeoutError::Timeout))
    });
    assert!(t.join().unwrap());
    // The thread dropped the only Receiver.
    assert!(matches!(
        tx.send_timeout(1, Duration::from_secs(10)),
        Err(SendTimeoutError::Closed(1))
    ));
}

// ---------------------------------------------------------------------------
// Iteration.

#[test]
fn iter_and_into_iter() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(3);
        let h = goro::spawn(move || {
            for i in 0..100 {
                tx.send(i).unwrap();
            }
        });
        assert_eq!(rx.iter().collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
        h.join().unwrap();

        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || {
            for i in 0..10 {
                tx.send(i).unwrap();
            }
            tx.close();
        });
        let mut sum = 0;
        for v in &rx {
            sum += v;
        }
        assert_eq!(sum, 45);
        h.join().unwrap();
    });
}

// ---------------------------------------------------------------------------
// Plain OS threads.

#[test]
fn plain_thread_to_goroutine() {
    let _w = common::watchdog();
    let (tx, rx) = chan::<u64>(0);
    let g = goro::spawn(move || rx.iter().sum::<u64>());
    let t = std::thread::spawn(move || {
        for i in 0..1000 {
            tx.send(i).unwrap();
        }
    });
    t.join().unwrap();
    assert_eq!(g.join().unwrap(), 499_500);
}

#[test]
fn goroutine_to_plain_thread() {
    let _w = common::watchdog();
    let (tx, rx) = chan::<u64>(2);
    let t = std::thread::spawn(move || rx.iter().sum::<u64>());
    run(move || {
        for i in 0..1000 {
            tx.send(i).unwrap();
        }
    });
    assert_eq!(t.join().unwrap(), 499_500);
}

/// Two plain threads rendezvous on an unbuffered channel, no goroutines
/// involved.
#[test]
fn plain_thread_to_plain_thread() {
    let _w = common::watchdog();
    let (tx, rx) = chan::<u64>(0);
    let (ack_tx, ack_rx) = chan::<u64>(0);
    let a = std::thread::spawn(move || {
        for i in 0..200 {
            tx.send(i).unwrap();
            assert_eq!(ack_rx.recv(), Ok(i));
        }
    });
    let b = std::thread::spawn(move || {
        for v in rx.iter() {
            ack_tx.send(v).unwrap();
        }
    });
    a.join().unwrap();
    b.join().unwrap();
}

/// Producers and consumers mixed: two plain threads and two goroutines on
/// each side of buffered and unbuffered channels.
#[test]
fn mixed_threads_and_goroutines_mpmc() {
    let _w = common::watchdog();
    let per = scale(5000) as u64;
    for cap in [0usize, 16] {
        let (tx, rx) = chan::<u64>(cap);
        let mut producers_t = Vec::new();
        let mut producers_g = Vec::new();
        for p in 0..4u64 {
            let tx = tx.clone();
            let f = move || {
                for i in 0..per {
                    tx.send(p * per + i).unwrap();
                }
            };
            if p % 2 == 0 {
                producers_t.push(std::thread::spawn(f));
            } else {
                producers_g.push(goro::spawn(f));
            }
        }
        drop(tx);
        let mut consumers_t = Vec::new();
        let mut consumers_g = Vec::new();
        for c in 0..4 {
            let rx = rx.clone();
            let f = move || rx.iter().fold((0u64, 0u64), |(n, s), v| (n + 1, s + v));
            if c % 2 == 0 {
                consumers_t.push(std::thread::spawn(f));
            } else {
                consumers_g.push(goro::spawn(f));
            }
        }
        drop(rx);
        for p in producers_t {
            p.join().unwrap();
        }
        for p in producers_g {
            p.join().unwrap();
        }
        let mut total = (0, 0);
        for c in consumers_t {
            let (n, s) = c.join().unwrap();
            total = (total.0 + n, total.1 + s);
        }
        for c in consumers_g {
            let (n, s) = c.join().unwrap();
            total = (total.0 + n, total.1 + s);
        }
        let n = 4 * per;
        assert_eq!(total, (n, n * (n - 1) / 2), "chan[{cap}]");
    }
}

/// Channel operations, joins, sleeps, select and nested `blocking` inside
/// `goro::blocking` (the goroutine has no P there) block the thread instead
/// of parking, and the goroutine continues normally afterwards.
#[test]
fn runtime_calls_inside_blocking() {
    let _w = common::watchdog();
    goro::run(|| {
        let (tx, rx) = goro::chan::<u32>(0);
        let h = goro::go!(move || {
            for i in 0..3 {
                tx.send(i).unwrap();
            }
        });
        let got = goro::blocking(|| {
            let a = rx.recv().unwrap();
            let b = goro::select! { recv(rx) -> v => v.unwrap() };
            let c = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
            goro::time::sleep(std::time::Duration::from_millis(1));
            let nested = goro::blocking(|| 7);
            (a, b, c, nested)
        });
        assert_eq!(got, (0, 1, 2, 7));
        h.join().unwrap();
        // Back on a P: parking works again.
        let (tx2, rx2) = goro::chan::<u32>(0);
        let h2 = goro::go!(move || tx2.send(9).unwrap());
        assert_eq!(rx2.recv().unwrap(), 9);
        h2.join().unwrap();
    });
}

const EXIT_CHILD_ENV: &str = "GORO_EXIT_CHILD";

/// As in Go, a process whose main returns while goroutines are parked,
/// sleeping or spinning exits normally. The scenario runs in a child process
/// (this binary, this test, with EXIT_CHILD_ENV set), whose exit status the
/// parent checks.
#[test]
fn process_exits_with_goroutines_still_alive() {
    let _w = common::watchdog();
    if std::env::var_os(EXIT_CHILD_ENV).is_some() {
        let (tx, rx) = goro::chan::<u8>(0);
        goro::go!(move || {
            let _ = rx.recv();
        });
        goro::go!(|| goro::time::sleep(std::time::Duration::from_secs(3600)));
        goro::go!(|| loop {
            std::hint::spin_loop();
        });
        goro::run(goro::yield_now);
        std::mem::forget(tx); // keep the receiver parked
        return; // the test harness now exits the process
    }
    let exe = std::env::current_exe().unwrap();
    let qemu = std::env::var_os("GORO_QEMU").is_some() && std::env::consts::ARCH == "aarch64";
    let mut cmd = if qemu {
        let mut c = std::process::Command::new("qemu-aarch64");
        c.arg("-L").arg("/usr/aarch64-linux-gnu").arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    let out = cmd
        .args([
            "process_exits_with_goroutines_still_alive",
            "--exact",
            "--test-threads=1",
        ])
        .env(EXIT_CHILD_ENV, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child exited with {:?}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

// ---------------------------------------------------------------------------
// Rust conventions: auto traits, Debug, crossbeam-compatible helpers.

/// Static assertions: channel ends are unwind-safe (`catch_unwind(|| tx.send(1))`
/// compiles), goro's Mutex/RwLock are RefUnwindSafe and Cond and the lock
/// guards UnwindSafe and RefUnwindSafe like std's, JoinHandle<T>
/// is Send + Sync for any T: Send (here a !Sync T), and every public type
/// implements Debug.
#[test]
fn auto_traits_and_debug() {
    let _w = common::watchdog();
    use std::panic::{RefUnwindSafe, UnwindSafe};
    fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}
    fn send_sync<T: Send + Sync>() {}
    fn debug<T: std::fmt::Debug>() {}
    unwind_safe::<goro::Sender<i32>>();
    unwind_safe::<goro::Receiver<i32>>();
    unwind_safe::<goro::Sender<std::cell::Cell<i32>>>();
    unwind_safe::<goro::time::Timer>();
    unwind_safe::<goro::time::Ticker>();
    fn ref_unwind_safe<T: RefUnwindSafe>() {}
    ref_unwind_safe::<goro::sync::Mutex<std::cell::Cell<i32>>>();
    ref_unwind_safe::<goro::sync::Mutex<i32>>();
    ref_unwind_safe::<goro::sync::RwLock<i32>>();
    // std's Condvar is both (h43: goro's Cond was neither).
    unwind_safe::<goro::sync::Cond>();
    // std's guards are both too (h43: goro's MutexGuard and
    // RwLockWriteGuard were not UnwindSafe).
    unwind_safe::<goro::sync::MutexGuard<'static, i32>>();
    unwind_safe::<goro::sync::RwLockReadGuard<'static, i32>>();
    unwind_safe::<goro::sync::RwLockWriteGuard<'static, i32>>();
    send_sync::<goro::JoinHandle<std::cell::Cell<i32>>>();
    send_sync::<goro::JoinHandle<i32>>();
    send_sync::<goro::time::Timer>();
    send_sync::<goro::time::Ticker>();
    debug::<goro::Iter<'static, i32>>();
    debug::<goro::IntoIter<i32>>();
    debug::<goro::TryIter<'static, i32>>();
    debug::<goro::SyscallGuard>();
    debug::<goro::JoinHandle<i32>>();
    debug::<goro::Builder>();
    debug::<goro::time::Timer>();
    debug::<goro::time::Ticker>();
    debug::<goro::Sender<i32>>();
    debug::<goro::Receiver<i32>>();
    debug::<goro::SendError<i32>>();
    debug::<goro::TrySendError<i32>>();
    debug::<goro::SendTimeoutError<i32>>();
    debug::<goro::Error>();

    // The motivating case: compiles without AssertUnwindSafe.
    let (tx, rx) = chan::<i32>(1);
    assert!(std::panic::catch_unwind(|| tx.send(1)).unwrap().is_ok());
    assert_eq!(std::panic::catch_unwind(|| rx.recv()).unwrap(), Ok(1));
    let m = goro::sync::Mutex::new(5);
    assert_eq!(std::panic::catch_unwind(|| *m.lock()).unwrap(), 5);
    let c = goro::sync::Cond::new();
    std::panic::catch_unwind(|| c.notify_all()).unwrap();
    let mut g = m.lock();
    *g += 1;
    assert_eq!(std::panic::catch_unwind(move || *g).unwrap(), 6);
    // Guards display their data, as std's do (h43: only MutexGuard did).
    assert_eq!(format!("{}", m.lock()), "6");
    let rw = goro::sync::RwLock::new(7);
    assert_eq!(format!("{}", rw.read()), "7");
    assert_eq!(format!("{:>3}", rw.write()), "  7");
    let (_tx, rx) = chan::<i32>(1);
    let s = format!("{:?} {:?}", rx.iter(), rx.try_iter());
    assert!(s.contains("Iter"), "{s}");
    assert!(format!("{:?}", rx.into_iter()).contains("IntoIter"));
}

/// try_iter yields what is available now and stops without blocking;
/// is_full on both ends; SendError::into_inner; From conversions as
/// crossbeam has them; Error::source.
#[test]
fn crossbeam_style_helpers() {
    let _w = common::watchdog();
    let (tx, rx) = chan::<i32>(3);
    assert!(!tx.is_full() && !rx.is_full());
    for i in 0..3 {
        tx.send(i).unwrap();
    }
    assert!(tx.is_full() && rx.is_full());
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(rx.try_iter().next(), None, "try_iter must not block");
    tx.send(9).unwrap();
    tx.close();
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![9]);
    let (utx, urx) = chan::<i32>(0);
    assert!(utx.is_full() && urx.is_full(), "unbuffered: no buffer room");

    let e = SendError(7);
    assert_eq!(e.into_inner(), 7);
    let t: TrySendError<i32> = SendError(1).into();
    assert!(matches!(t, TrySendError::Closed(1)) && t.is_closed() && !t.is_full());
    let t: SendTimeoutError<i32> = SendError(2).into();
    assert!(matches!(t, SendTimeoutError::Closed(2)) && t.is_closed());
    let t: TryRecvError = RecvError.into();
    assert_eq!(t, TryRecvError::Closed);
    assert!(t.is_closed() && !t.is_empty());
    let t: RecvTimeoutError = RecvError.into();
    assert_eq!(t, RecvTimeoutError::Closed);
    assert!(t.is_closed() && !t.is_timeout());

    use std::error::Error as _;
    let io = goro::Error::Io(std::io::Error::other("epoll"));
    assert_eq!(io.source().map(|s| s.to_string()).as_deref(), Some("epoll"));
    assert!(goro::Error::AlreadyRunning.source().is_none());
    assert!(RecvError.source().is_none());
}

/// chan with a capacity whose buffer cannot exist panics with "makechan:
/// size out of range", catchable by catch_unwind (never an abort), from a
/// plain thread and from a goroutine.
#[test]
fn impossible_channel_capacity_panics() {
    let _w = common::watchdog();
    fn check(from: &str) {
        for cap in [usize::MAX, usize::MAX / 8 + 1, 1 << 62] {
            let r = std::panic::catch_unwind(|| chan::<u64>(cap));
            let msg = match r {
                Ok(_) => panic!("{from}: chan::<u64>({cap}) succeeded"),
                Err(p) => panic_message(&*p),
            };
            assert!(
                msg.contains("makechan: size out of range"),
                "{from}: chan::<u64>({cap}) panicked with {msg:?}"
            );
        }
        // Zero-sized elements need no buffer: any capacity works.
        let (tx, rx) = chan::<()>(usize::MAX);
        tx.send(()).unwrap();
        assert_eq!(rx.len(), 1);
    }
    check("test thread");
    run(|| check("goroutine"));
}
