//! `goro::context` and `goro::errgroup`, ported from Go's
//! context/context_test.go (TestBackground, TestWithCancel,
//! TestParentFinishesChild, TestChildFinishesFirst, TestDeadline,
//! TestTimeout, TestCanceledTimeout, TestCancelRemoves) and
//! x/sync/errgroup's errgroup_test.go (TestZeroGroup, TestWithContext,
//! TestGoLimit, TestTryGo, TestPanic), plus what Rust adds: plain threads,
//! a deep chain of derived contexts on a goroutine's stack, and
//! cancellation waking many parked goroutines.
//!
//! No test sleeps to order events: every wait is on a context's `done`
//! channel or a join. Deadlines are only checked not to fire early.

mod common;
use common::{qemu, run};

use goro::context::{self, background, with_cancel, with_deadline, with_timeout, ContextError};
use goro::errgroup::Group;
use goro::{chan, TryRecvError};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn is_done(ctx: &context::Context) -> bool {
    matches!(ctx.done().try_recv(), Err(TryRecvError::Closed))
}

#[test]
fn background_is_never_done() {
    let ctx = background();
    assert_eq!(ctx.err(), None);
    assert_eq!(ctx.deadline(), None);
    assert!(matches!(ctx.done().try_recv(), Err(TryRecvError::Empty)));
    let r = run(|| {
        let ctx = background();
        goro::select! {
            recv(ctx.done()) -> _ => 1,
            default => 0,
        }
    });
    assert_eq!(r, 0);
}

/// TestWithCancel and TestParentFinishesChild: cancelling a child leaves
/// its parent and siblings alone; cancelling the parent reaches every
/// descendant, with `Canceled`, and empties its list of children.
#[test]
fn cancel_flows_down_not_up() {
    run(|| {
        let (parent, cancel_parent) = with_cancel(&background());
        let (a, cancel_a) = with_cancel(&parent);
        let (b, _cancel_b) = with_cancel(&parent);
        let (aa, _) = with_cancel(&a);
        let (bb, _) = with_timeout(&b, Duration::from_secs(3600));
        assert_eq!(context::__children(&parent), 2);
        assert_eq!(context::__children(&a), 1);

        cancel_a.cancel();
        assert_eq!(a.err(), Some(ContextError::Canceled));
        assert_eq!(aa.err(), Some(ContextError::Canceled));
        assert!(is_done(&a) && is_done(&aa));
        assert_eq!(parent.err(), None);
        assert_eq!(b.err(), None);
        assert!(!is_done(&parent) && !is_done(&b) && !is_done(&bb));
        // TestChildFinishesFirst: the cancelled child left its parent.
        assert_eq!(context::__children(&parent), 1);

        cancel_parent.cancel();
        for c in [&parent, &b, &bb] {
            assert_eq!(c.err(), Some(ContextError::Canceled));
            assert!(is_done(c));
        }
        assert_eq!(context::__children(&parent), 0);
        // Calls after the first do nothing.
        cancel_a.cancel();
        cancel_parent.cancel();
        assert_eq!(a.err(), Some(ContextError::Canceled));
    });
}

/// A child of a done parent is done at once, with the parent's error.
#[test]
fn child_of_a_done_context_is_done() {
    let (parent, cancel) = with_cancel(&background());
    cancel.cancel();
    let (child, _) = with_cancel(&parent);
    assert_eq!(child.err(), Some(ContextError::Canceled));
    assert!(is_done(&child));
    let (late, _) = with_timeout(&parent, Duration::from_secs(3600));
    assert_eq!(late.err(), Some(ContextError::Canceled));
}

/// TestDeadline/TestTimeout: a deadline cancels with DeadlineExceeded,
/// not before its time, and reaches the children; the parent is
/// untouched.
#[test]
fn deadline_cancels_with_deadline_exceeded() {
    run(|| {
        let d = Duration::from_millis(if qemu() { 100 } else { 20 });
        let start = Instant::now();
        let (ctx, _cancel) = with_timeout(&background(), d);
        let (child, _) = with_cancel(&ctx);
        assert_eq!(child.deadline(), ctx.deadline());
        assert!(ctx.deadline().unwrap() >= start + d);
        // Not done before its deadline (a stalled machine may already be
        // past it).
        assert!(ctx.err().is_none() || start.elapsed() >= d, "done early");
        assert!(child.done().recv().is_err());
        assert!(Instant::now() >= start + d, "the deadline fired early");
        assert_eq!(ctx.err(), Some(ContextError::DeadlineExceeded));
        assert_eq!(child.err(), Some(ContextError::DeadlineExceeded));
        assert_eq!(background().err(), None);
    });
}

/// A deadline already past: done at once. A later deadline under an
/// earlier one keeps the earlier (the parent's).
#[test]
fn deadline_past_and_nested() {
    let (ctx, _) = with_deadline(&background(), Instant::now() - Duration::from_millis(1));
    assert_eq!(ctx.err(), Some(ContextError::DeadlineExceeded));
    let soon = Instant::now() + Duration::from_secs(60);
    let (outer, _) = with_deadline(&background(), soon);
    let (inner, _) = with_timeout(&outer, Duration::from_secs(3600));
    assert_eq!(inner.deadline(), Some(soon));
    let (tighter, _) = with_timeout(&outer, Duration::from_secs(1));
    assert!(tighter.deadline().unwrap() < soon);
    // An unrepresentable timeout: no deadline of its own.
    let (forever, _) = with_timeout(&background(), Duration::MAX);
    assert_eq!(forever.deadline(), None);
}

/// TestCanceledTimeout: cancelled before its deadline, the error is
/// Canceled and stays so after the deadline would have passed. (A round
/// whose deadline fired before the cancel, as a stalled machine allows —
/// it happened under qemu in CI with 5 ms — tests nothing: it is
/// repeated.)
#[test]
fn cancel_before_deadline_is_canceled() {
    run(|| {
        let d = Duration::from_millis(if qemu() { 100 } else { 20 });
        for _ in 0..100 {
            let (ctx, cancel) = with_timeout(&background(), d);
            if ctx.err().is_some() {
                continue;
            }
            cancel.cancel();
            if ctx.err() == Some(ContextError::DeadlineExceeded) {
                continue; // the deadline won the race
            }
            assert_eq!(ctx.err(), Some(ContextError::Canceled));
            // Past the deadline (a later timer has fired): had the
            // deadline's timer not been stopped, it would have cancelled
            // again with DeadlineExceeded, which must not replace the
            // first error.
            let (probe, _) = with_timeout(&background(), 2 * d);
            assert!(probe.done().recv().is_err());
            assert_eq!(ctx.err(), Some(ContextError::Canceled));
            return;
        }
        panic!("the deadline fired before the cancel in 100 rounds");
    });
}

/// Every goroutine parked on `done` (in `select!` against other work) is
/// woken by one cancel, on goroutines and on a plain thread.
#[test]
fn cancel_wakes_every_waiter() {
    run(|| {
        let n = if qemu() { 200 } else { 2_000 };
        let (ctx, cancel) = with_cancel(&background());
        let (_work_tx, work_rx) = chan::<u32>(0);
        let parked = Arc::new(goro::sync::WaitGroup::new());
        parked.add(n);
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let (ctx, work_rx, parked) = (ctx.clone(), work_rx.clone(), parked.clone());
                goro::spawn(move || {
                    parked.done();
                    goro::select! {
                        recv(ctx.done()) -> r => { assert!(r.is_err()); ctx.err() }
                        recv(work_rx) -> _ => None,
                    }
                })
            })
            .collect();
        let thread = {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                assert!(ctx.done().recv().is_err());
                ctx.err()
            })
        };
        parked.wait();
        cancel.cancel();
        for h in hs {
            assert_eq!(h.join().unwrap(), Some(ContextError::Canceled));
        }
        assert_eq!(thread.join().unwrap(), Some(ContextError::Canceled));
    });
}

/// A chain of 20,000 derived contexts is cancelled from its root, and
/// freed, on a goroutine's default-size stack: both are iterative.
/// Recursion as in Go, whose stacks grow, overflowed the 256 KiB stack in
/// each (the cancel and the drop of the chain of parents).
#[test]
fn deep_chain_cancels_without_recursion() {
    run(|| {
        goro::spawn(|| {
            let (root, cancel) = with_cancel(&background());
            let mut chain = vec![root.clone()];
            let mut cancels = Vec::new();
            for _ in 0..20_000 {
                let (c, f) = with_cancel(chain.last().unwrap());
                chain.push(c);
                cancels.push(f);
            }
            cancel.cancel();
            assert!(chain
                .iter()
                .all(|c| c.err() == Some(ContextError::Canceled)));
            assert!(is_done(chain.last().unwrap()));
        })
        .join()
        .unwrap()
    });
}

/// Children dropped without being cancelled do not pile up in the
/// parent's list (Go keeps them until the parent is cancelled).
#[test]
fn dropped_children_are_pruned() {
    let (parent, _cancel) = with_cancel(&background());
    for _ in 0..10_000 {
        drop(with_cancel(&parent));
    }
    assert!(
        context::__children(&parent) <= 16,
        "{}",
        context::__children(&parent)
    );
}

#[test]
fn context_error_display_and_io() {
    assert_eq!(ContextError::Canceled.to_string(), "context canceled");
    assert_eq!(
        ContextError::DeadlineExceeded.to_string(),
        "context deadline exceeded"
    );
    let e: std::io::Error = ContextError::DeadlineExceeded.into();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
}

// ---------------------------------------------------------------------------
// errgroup

/// TestZeroGroup: the first error wins, later ones are dropped; wait
/// without errors is Ok.
#[test]
fn errgroup_first_error_wins() {
    run(|| {
        let g = Group::<u32>::new();
        for i in 0..10 {
            g.go(move || if i % 2 == 0 { Ok(()) } else { Err(i) });
        }
        let e = g.wait().unwrap_err();
        assert!(e % 2 == 1);
        let ok = Group::<u32>::new();
        let count = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let count = count.clone();
            ok.go(move || {
                count.fetch_add(1, SeqCst);
                Ok(())
            });
        }
        assert_eq!(ok.wait(), Ok(()));
        assert_eq!(count.load(SeqCst), 100);
    });
}

/// TestWithContext: the first error cancels the context, which the other
/// goroutines are parked on; `wait` cancels it even without an error.
#[test]
fn errgroup_error_cancels_context() {
    run(|| {
        let (g, ctx) = Group::<&'static str>::with_context(&background());
        for _ in 0..20 {
            let ctx = ctx.clone();
            g.go(move || {
                assert!(ctx.done().recv().is_err());
                Ok(())
            });
        }
        assert_eq!(ctx.err(), None);
        g.go(|| Err("boom"));
        assert_eq!(g.wait(), Err("boom"));
        assert_eq!(ctx.err(), Some(ContextError::Canceled));

        let (g, ctx) = Group::<()>::with_context(&background());
        g.go(|| Ok(()));
        assert_eq!(g.wait(), Ok(()));
        assert_eq!(ctx.err(), Some(ContextError::Canceled));
    });
}

/// TestGoLimit/TestTryGo: with a limit of 2, a third function is refused
/// by try_go while two are running, accepted once they finish; `go`
/// never has more than the limit running.
#[test]
fn errgroup_limit() {
    run(|| {
        let g = Group::<()>::new();
        g.set_limit(Some(2));
        let (gate_tx, gate_rx) = chan::<()>(0);
        let started = Arc::new(goro::sync::WaitGroup::new());
        started.add(2);
        for _ in 0..2 {
            let (gate_rx, started) = (gate_rx.clone(), started.clone());
            assert!(g.try_go(move || {
                started.done();
                let _ = gate_rx.recv();
                Ok(())
            }));
        }
        started.wait();
        assert!(!g.try_go(|| Ok(())), "a third function ran past the limit");
        drop(gate_tx);
        assert_eq!(g.wait(), Ok(()));
        assert!(g.try_go(|| Ok(())));
        assert_eq!(g.wait(), Ok(()));

        let running = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        for _ in 0..200 {
            let (running, max) = (running.clone(), max.clone());
            g.go(move || {
                let now = running.fetch_add(1, SeqCst) + 1;
                max.fetch_max(now, SeqCst);
                for _ in 0..3 {
                    goro::yield_now();
                }
                running.fetch_sub(1, SeqCst);
                Ok(())
            });
        }
        assert_eq!(g.wait(), Ok(()));
        assert!(max.load(SeqCst) <= 2, "{} ran at once", max.load(SeqCst));
        g.set_limit(None);
    });
}

/// Changing the limit while the group runs panics (as Go's).
#[test]
fn errgroup_set_limit_while_active_panics() {
    run(|| {
        let g = Group::<()>::new();
        g.set_limit(Some(1));
        let (gate_tx, gate_rx) = chan::<()>(0);
        g.go(move || {
            let _ = gate_rx.recv();
            Ok(())
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.set_limit(Some(4))));
        assert!(r.is_err());
        drop(gate_tx);
        assert_eq!(g.wait(), Ok(()));
    });
}

/// Removing the limit (`None`, Go's negative n) is allowed while the group
/// runs, as Go's SetLimit returns before its check for n < 0: the running
/// goroutines give their permits back to the old limit, and new ones are
/// not limited. h43: it panicked 'modify limit while goroutines in the
/// group are still active'.
#[test]
fn errgroup_removing_the_limit_while_active_does_not_panic() {
    let _w = common::watchdog();
    run(|| {
        let g = Group::<()>::new();
        g.set_limit(Some(1));
        let (gate_tx, gate_rx) = chan::<()>(0);
        for _ in 0..2 {
            let gate_rx = gate_rx.clone();
            let go = move || {
                let _ = gate_rx.recv();
                Ok(())
            };
            if g.try_go(go.clone()) {
                continue;
            }
            // At the limit: remove it (as Go's g.SetLimit(-1)), then go.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.set_limit(None)));
            assert!(r.is_ok(), "removing the limit while active panicked");
            assert!(g.try_go(go), "the removed limit still applies");
        }
        drop(gate_tx);
        assert_eq!(g.wait(), Ok(()));
        // A new limit once the group is idle again.
        g.set_limit(Some(1));
        assert!(g.try_go(|| Ok(())));
        assert_eq!(g.wait(), Ok(()));
    });
}

/// Any limit is accepted, as Go's SetLimit accepts any int (its semaphore
/// is a channel of zero-sized tokens): one above `u32::MAX` limits nothing
/// in practice. h43: it panicked 'goro::sync::Semaphore: more than
/// u32::MAX permits' (the limit's semaphore holds at most that many).
#[test]
fn errgroup_limit_above_u32_max() {
    let _w = common::watchdog();
    run(|| {
        let g = Group::<()>::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.set_limit(Some(usize::MAX))
        }));
        assert!(r.is_ok(), "a limit above u32::MAX panicked");
        for _ in 0..10 {
            assert!(g.try_go(|| Ok(())));
        }
        g.go(|| Ok(()));
        assert_eq!(g.wait(), Ok(()));
    });
}

/// TestPanic: a panic in a group goroutine cancels the context and is
/// resumed by `wait`, after the other goroutines have finished.
#[test]
fn errgroup_panic_is_resumed_by_wait() {
    run(|| {
        let (g, ctx) = Group::<()>::with_context(&background());
        let finished = Arc::new(AtomicUsize::new(0));
        for _ in 0..5 {
            let (ctx, finished) = (ctx.clone(), finished.clone());
            g.go(move || {
                assert!(ctx.done().recv().is_err());
                finished.fetch_add(1, SeqCst);
                Ok(())
            });
        }
        g.go(|| panic!("errgroup task panicked (expected)"));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.wait()));
        let payload = r.unwrap_err();
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"errgroup task panicked (expected)")
        );
        assert_eq!(finished.load(SeqCst), 5);
        assert_eq!(ctx.err(), Some(ContextError::Canceled));
    });
}

/// A group goroutine whose error is dropped (not the first) by a
/// destructor that panics still counts as done: `wait` returns the first
/// error (h27: `wait` waited for ever, the panic having skipped the
/// goroutine's `done`).
#[test]
fn errgroup_later_error_panicking_on_drop_does_not_hang_wait() {
    #[derive(Debug, PartialEq)]
    struct E(u32);
    impl Drop for E {
        fn drop(&mut self) {
            if self.0 == 2 && !std::thread::panicking() {
                panic!("a later error's destructor panics (expected)");
            }
        }
    }
    run(|| {
        let (g, ctx) = Group::<E>::with_context(&background());
        g.go(|| Err(E(1)));
        // Closed once the first error is kept.
        assert!(ctx.done().recv().is_err());
        g.go(|| Err(E(2)));
        // A hang detector, not a speed check: `wait` returns at once.
        let (tx, rx) = chan(1);
        goro::go!(move || tx.send(g.wait()).unwrap());
        let r = rx.recv_timeout(Duration::from_secs(20));
        assert_eq!(r, Ok(Err(E(1))), "wait waits for a goroutine that ended");
    });
}

/// A `go` whose goroutine cannot be created (its stack cannot be mapped)
/// panics and leaves the group as if it had not been called: `wait` does
/// not wait for it, and the permit it took under a limit is given back
/// (h27: `wait` waited for ever, reported as a deadlock, and the permit was
/// lost). In a child process, as the mapping failure is process-wide.
#[test]
fn errgroup_failed_go_leaves_nothing_behind() {
    const CHILD: &str = "GORO_ERRGROUP_FAILED_GO_CHILD";
    if std::env::var_os(CHILD).is_some() {
        run(|| {
            let fail_go = |g: &Group<()>| {
                goro::__private::fail_stack_allocs(1);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.go(|| Ok(()))));
                let payload = r.expect_err("go did not panic");
                let msg = payload.downcast_ref::<String>().expect("a String payload");
                assert!(msg.contains("cannot allocate"), "{msg}");
            };
            let g = Group::<()>::new();
            g.set_limit(Some(1));
            fail_go(&g);
            assert!(g.try_go(|| Ok(())), "the failed go kept its permit");
            // A hang detector, not a speed check: `wait` returns at once.
            let (tx, rx) = chan(1);
            goro::go!(move || tx.send(g.wait()).unwrap());
            let r = rx.recv_timeout(Duration::from_secs(60));
            assert_eq!(r, Ok(Ok(())), "wait waits for the goroutine never created");
        });
        eprintln!("CHILD OK");
        return;
    }
    let out = common::self_test_command("errgroup_failed_go_leaves_nothing_behind")
        .env(CHILD, "1")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("CHILD OK"),
        "child exited with {:?}:\n{stderr}",
        out.status
    );
}

goro::goroutine_local! {
    /// A group goroutine's per-goroutine buffer, flushed when it drops.
    static FLUSH_ON_EXIT: std::cell::RefCell<Option<FlushOnDrop>> =
        const { std::cell::RefCell::new(None) };
}

/// A goroutine-local value that "flushes" into a shared counter when its
/// goroutine exits, after waiting until the group's waiter is parked (so
/// the flush happens while `wait` is still waiting, if it waits for it at
/// all).
struct FlushOnDrop {
    waiter: u64,
    flushed: Arc<AtomicUsize>,
}

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        common::wait_parked(self.waiter);
        self.flushed.fetch_add(1, SeqCst);
    }
}

/// `wait` returns once the group's goroutines have finished, their
/// goroutine-locals dropped (as `join` and `scope` see them). h43: a group
/// goroutine marked itself done before its locals were dropped (in the
/// goroutine's epilogue), so `wait` returned while their destructors had
/// not run (here: were still waiting for the waiter to park, which it
/// never did again).
#[test]
fn errgroup_wait_waits_for_goroutine_local_destructors() {
    let _w = common::watchdog();
    run(|| {
        let waiter = goro::current_id().unwrap();
        let flushed = Arc::new(AtomicUsize::new(0));
        let n = 4;
        let g = Group::<()>::new();
        for _ in 0..n {
            let flushed = flushed.clone();
            g.go(move || {
                FLUSH_ON_EXIT.set(Some(FlushOnDrop { waiter, flushed }));
                Ok(())
            });
        }
        assert_eq!(g.wait(), Ok(()));
        assert_eq!(
            flushed.load(SeqCst),
            n,
            "wait returned before the group's goroutine-locals were dropped"
        );
    });
}

/// A panic in a group goroutine's goroutine-local destructor is that
/// goroutine's panic: it cancels the group's context and `wait` resumes
/// it. h43: it was caught and discarded (`wait` returned `Ok`).
#[test]
fn errgroup_local_destructor_panic_is_resumed_by_wait() {
    let _w = common::watchdog();
    run(|| {
        let (g, ctx) = Group::<()>::with_context(&background());
        g.go(|| {
            common::FAILS_ON_EXIT.set(Some(common::LocalPanicsOnDrop));
            Ok(())
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.wait()));
        let payload = r.expect_err("wait returned although a destructor panicked");
        assert_eq!(
            *payload.downcast::<&str>().unwrap(),
            "goroutine-local destructor panics (expected by the test)"
        );
        assert_eq!(ctx.err(), Some(ContextError::Canceled));
    });
}
