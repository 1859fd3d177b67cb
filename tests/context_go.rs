//! Ports of the rest of Go's context/context_test.go (1.19) that apply to
//! goro::context: TestSimultaneousCancels, TestInterlockedCancels,
//! TestLayersCancel and TestLayersTimeout. (tests/context.rs has the
//! earlier ports.) goro has no `WithValue`, so testLayers builds its
//! random chain of layers from `with_cancel` and `with_timeout` only.
//!
//! No sleep orders anything: every wait is on a context's `done` channel,
//! a WaitGroup or a join. Go's tests bound each wait by `quiescent(t)` (the
//! test's remaining time) and print every goroutine's stack when it runs
//! out; here the bound is `quiescent()` (minutes), and the failure message
//! carries `goro::dump`.

mod common;
use common::{qemu, run, scale};

use goro::context::{background, with_cancel, with_timeout, CancelFunc, Context, ContextError};
use goro::sync::WaitGroup;
use goro::TryRecvError;
use std::time::Duration;

/// Go's `quiescent(t)`: how long to wait for something that must happen
/// before declaring the runtime stuck. Not a speed assertion: minutes.
fn quiescent() -> Duration {
    Duration::from_secs(if qemu() { 300 } else { 60 })
}

/// Every goroutine's stack (Go's `runtime.Stack(buf, true)`).
fn stacks() -> String {
    let mut buf = Vec::new();
    let _ = goro::dump(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Waits until `ctx` is done, at most `quiescent()`; past that, panics
/// with `what` and every goroutine's stack (Go's tests print them too).
fn await_done(ctx: &Context, what: impl std::fmt::Display) {
    let timer = goro::time::Timer::new(quiescent());
    goro::select! {
        recv(ctx.done()) -> _ => {}
        recv(timer.receiver()) -> _ => panic!(
            "{what}: not done after {:?}; stacks:\n{}",
            quiescent(),
            stacks()
        ),
    }
    timer.stop();
}

fn is_done(ctx: &Context) -> bool {
    matches!(ctx.done().try_recv(), Err(TryRecvError::Closed))
}

/// A small xorshift generator: Go's tests use math/rand seeded by the
/// clock and print the seed on failure; so do these.
struct Rng(u64);

impl Rng {
    fn from_clock() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// TestSimultaneousCancels (context/context_test.go): a tree of 100+
/// contexts (each node with four children) cancelled by one goroutine per
/// node, all at once and in random order; every context ends up done and
/// every cancel function returns (a lock-order inversion between a parent
/// cancelling its children and a child removing itself from its parent
/// would deadlock here).
#[test]
fn simultaneous_cancels() {
    let _w = common::watchdog();
    run(|| {
        let rounds = scale(20);
        for _ in 0..rounds {
            let mut rng = Rng::from_clock();
            let seed = rng.0;
            let (root, cancel) = with_cancel(&background());
            let mut all: Vec<(Context, CancelFunc)> = vec![(root.clone(), cancel)];
            let mut q = std::collections::VecDeque::from([root]);
            // Create a tree of contexts.
            while let Some(parent) = q.pop_front() {
                if all.len() >= 100 {
                    break;
                }
                for _ in 0..4 {
                    let (ctx, cancel) = with_cancel(&parent);
                    all.push((ctx.clone(), cancel));
                    q.push_back(ctx);
                }
            }
            rng.shuffle(&mut all);
            // Start all the cancels in a random order.
            let wg = WaitGroup::new();
            wg.add(all.len());
            for (_, cancel) in &all {
                let (cancel, wg) = (cancel.clone(), wg.clone());
                goro::go!(move || {
                    cancel.cancel();
                    wg.done();
                });
            }
            let stuck = goro::time::after(quiescent());
            // Wait on all the contexts in a random order.
            rng.shuffle(&mut all);
            for (ctx, _) in &all {
                goro::select! {
                    recv(ctx.done()) -> _ => {}
                    recv(stuck) -> _ => panic!(
                        "seed={seed}: timed out after {:?} waiting for ctx.done(); stacks:\n{}",
                        quiescent(),
                        stacks()
                    ),
                }
                assert_eq!(ctx.err(), Some(ContextError::Canceled));
            }
            // Wait for all the cancel functions to return.
            let (done_tx, done_rx) = goro::chan::<()>(0);
            goro::go!(move || {
                wg.wait();
                drop(done_tx);
            });
            goro::select! {
                recv(done_rx) -> _ => {}
                recv(stuck) -> _ => panic!(
                    "seed={seed}: timed out after {:?} waiting for cancel functions; stacks:\n{}",
                    quiescent(),
                    stacks()
                ),
            }
        }
    });
}

/// TestInterlockedCancels (context/context_test.go): a goroutine waiting on
/// the parent's done channel cancels the child, while cancelling the parent
/// is itself cancelling that child. Both paths must complete.
#[test]
fn interlocked_cancels() {
    let _w = common::watchdog();
    run(|| {
        for _ in 0..scale(1000) {
            let (parent, cancel_parent) = with_cancel(&background());
            let (child, cancel_child) = with_cancel(&parent);
            let p = parent.clone();
            let h = goro::go!(move || {
                let _ = p.done().recv();
                cancel_child.cancel();
            });
            cancel_parent.cancel();
            await_done(&child, "waiting for child.done()");
            h.join().unwrap();
            assert_eq!(child.err(), Some(ContextError::Canceled));
        }
    });
}

/// Go's testLayers without the `WithValue` layers (goro has none): a random
/// chain of at least 30 layers of `with_cancel` and `with_timeout`, with at
/// least one of each. With `test_timeout`, the timeouts are short and the
/// innermost context must time out; otherwise they are very long and
/// cancelling a random layer must make the innermost context done at once
/// (cancellation propagates synchronously).
fn test_layers(test_timeout: bool) {
    let mut rng = Rng::from_clock();
    let seed = rng.0;
    const MIN_LAYERS: usize = 30;
    let short = Duration::from_millis(if qemu() { 100 } else { 20 });
    let very_long = Duration::from_secs(40_000);
    let mut cancels: Vec<CancelFunc> = Vec::new();
    let mut num_timers = 0;
    let mut ctx = background();
    let mut i = 0;
    while i < MIN_LAYERS || num_timers == 0 || cancels.is_empty() {
        // Go draws from three kinds; the `WithValue` kind is a no-op here.
        match rng.below(3) {
            0 => {}
            1 => {
                let (c, cancel) = with_cancel(&ctx);
                ctx = c;
                cancels.push(cancel);
            }
            _ => {
                let d = if test_timeout { short } else { very_long };
                let (c, cancel) = with_timeout(&ctx, d);
                ctx = c;
                cancels.push(cancel);
                num_timers += 1;
            }
        }
        i += 1;
    }
    if !test_timeout {
        assert!(
            !is_done(&ctx),
            "seed={seed}: ctx should not be canceled yet"
        );
    }
    if test_timeout {
        await_done(&ctx, format!("seed={seed}: ctx should have timed out"));
        assert_eq!(
            ctx.err(),
            Some(ContextError::DeadlineExceeded),
            "seed={seed}"
        );
    } else {
        let cancel = &cancels[rng.below(cancels.len())];
        cancel.cancel();
        assert!(is_done(&ctx), "seed={seed}: ctx should be canceled");
        assert_eq!(ctx.err(), Some(ContextError::Canceled), "seed={seed}");
    }
    // Go's tests defer nothing here; cancel every layer to release timers.
    for c in cancels {
        c.cancel();
    }
}

/// TestLayersCancel (context/context_test.go), without value layers.
#[test]
fn layers_cancel() {
    let _w = common::watchdog();
    run(|| {
        for _ in 0..scale(200) {
            test_layers(false);
        }
    });
}

/// TestLayersTimeout (context/context_test.go), without value layers; also
/// from several goroutines at once (Go runs it with t.Parallel()).
#[test]
fn layers_timeout() {
    let _w = common::watchdog();
    run(|| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                goro::go!(|| {
                    for _ in 0..scale(20) {
                        test_layers(true);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}
