//! Timer tests ported from Go's time/sleep_test.go and tick_test.go
//! (TestSleep, TestAfter, TestAfterTick, TestAfterQueuing, TestAfterStress,
//! TestSleepZeroDeadlock, TestOverflowSleep, TestTick) against
//! goro::time::{sleep, after, tick}.
//!
//! Only lower bounds on elapsed time are asserted (a timer must never fire
//! early); no test asserts that anything is fast.

mod common;
use common::{run, scale};

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goro::chan;
use goro::time::{after, sleep, tick};

/// TestSleep: sleep(d) lasts at least d, also while another goroutine's
/// timer fires in the middle.
#[test]
fn sleep_lower_bound() {
    run(|| {
        let delay = Duration::from_millis(100);
        let h = goro::spawn(move || sleep(delay / 2));
        let start = Instant::now();
        sleep(delay);
        let slept = start.elapsed();
        assert!(slept >= delay, "sleep({delay:?}) slept for only {slept:?}");
        h.join().unwrap();
    });
}

/// TestAfter: after(d) delivers no earlier than d, and the Instant it
/// delivers is no earlier than the deadline.
#[test]
fn after_lower_bound() {
    run(|| {
        let delay = Duration::from_millis(100);
        let start = Instant::now();
        let end = after(delay).recv().unwrap();
        let took = start.elapsed();
        assert!(took >= delay, "after({delay:?}) took only {took:?}");
        assert!(
            end >= start + delay,
            "after({delay:?}) sent {:?} after start",
            end - start
        );
    });
}

/// TestAfterTick: ten after(d) in a row take at least 10*d (the "too slow"
/// upper bound of Go's test is left out on purpose).
#[test]
fn after_tick() {
    run(|| {
        const COUNT: u32 = 10;
        let delta = Duration::from_millis(10);
        let t0 = Instant::now();
        for _ in 0..COUNT {
            after(delta).recv().unwrap();
        }
        let d = t0.elapsed();
        assert!(
            d >= delta * COUNT,
            "{COUNT} ticks of {delta:?} too fast: took {d:?}"
        );
    });
}

/// TestAfterQueuing: timers started together in scrambled order fire in
/// deadline order, each no earlier than its deadline. The ordering part is
/// retried with a growing spacing, as in Go (timers that are due close
/// together may be run late by the same amount).
#[test]
fn after_queuing() {
    const SLOTS: [u32; 13] = [5, 3, 6, 6, 6, 1, 1, 2, 7, 9, 4, 8, 0];
    fn attempt(delta: Duration) -> Result<(), String> {
        let (result_tx, result_rx) = chan::<(u32, Instant)>(SLOTS.len());
        let t0 = Instant::now();
        let hs: Vec<_> = SLOTS
            .iter()
            .map(|&slot| {
                let ac = after(delta * slot);
                let result_tx = result_tx.clone();
                goro::spawn(move || result_tx.send((slot, ac.recv().unwrap())).unwrap())
            })
            .collect();
        let mut got = Vec::new();
        for _ in SLOTS {
            got.push(result_rx.recv().unwrap());
        }
        for h in hs {
            h.join().unwrap();
        }
        // Lower bounds are never retried: a timer must not fire early.
        for &(slot, t) in &got {
            assert!(
                t >= t0 + delta * slot,
                "after({:?}) fired at {:?}",
                delta * slot,
                t - t0
            );
        }
        let order: Vec<u32> = got.iter().map(|&(s, _)| s).collect();
        if order.windows(2).any(|w| w[1] < w[0]) {
            return Err(format!("after() calls returned out of order: {order:?}"));
        }
        Ok(())
    }
    run(|| {
        let mut last = Ok(());
        for i in 0..5u32 {
            let delta = Duration::from_millis((20 + i * 50) as u64);
            last = attempt(delta);
            match &last {
                Ok(()) => break,
                Err(e) => println!("attempt {i} failed: {e}"),
            }
        }
        last.unwrap();
    });
}

/// TestAfterStress-like: many goroutines sleeping and waiting on after()
/// concurrently, all wake, none early.
#[test]
fn many_concurrent_timers() {
    run(|| {
        let n = scale(2000);
        let woke = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let woke = woke.clone();
                goro::spawn(move || {
                    let d = Duration::from_micros(((i * 7919) % 20_000) as u64);
                    let start = Instant::now();
                    if i % 2 == 0 {
                        sleep(d);
                    } else {
                        after(d).recv().unwrap();
                    }
                    let took = start.elapsed();
                    assert!(took >= d, "timer {i}: {d:?} fired after {took:?}");
                    woke.fetch_add(1, SeqCst);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(woke.load(SeqCst), n);
    });
}

/// A timer created by one goroutine is received by another (timers live on
/// per-P heaps; the receiver may run elsewhere).
#[test]
fn after_received_by_other_goroutine() {
    run(|| {
        let d = Duration::from_millis(30);
        let start = Instant::now();
        let timers: Vec<_> = (0..16).map(|_| after(d)).collect();
        let hs: Vec<_> = timers
            .into_iter()
            .map(|t| goro::spawn(move || t.recv().unwrap()))
            .collect();
        for h in hs {
            assert!(h.join().unwrap() >= start + d);
        }
        assert!(start.elapsed() >= d);
    });
}

/// TestSleepZeroDeadlock: sleep(0) returns and leaves the goroutine runnable,
/// interleaved with channel operations; after(0) fires.
#[test]
fn sleep_zero() {
    run(|| {
        let h = goro::spawn(|| {
            for _ in 0..100 {
                sleep(Duration::ZERO);
                goro::yield_now();
            }
        });
        for _ in 0..100 {
            sleep(Duration::ZERO);
            let (tx, rx) = chan::<bool>(1);
            tx.send(true).unwrap();
            assert!(rx.recv().unwrap());
        }
        h.join().unwrap();
        let start = Instant::now();
        let t = after(Duration::ZERO).recv().unwrap();
        assert!(t >= start);
    });
}

/// TestOverflowSleep: Duration::MAX means "never fires" and must not panic:
/// a goroutine sleeping Duration::MAX (never joined) stays asleep, and
/// after(Duration::MAX) loses to after(25ms).
#[test]
fn overflow_sleep() {
    run(|| {
        let big = goro::spawn(|| {
            sleep(Duration::MAX);
            panic!("big sleep returned");
        });
        let fired = goro::select! {
            recv(after(Duration::MAX)) -> _t => { "big" },
            recv(after(Duration::from_millis(25))) -> _t => { "small" },
        };
        assert_eq!(fired, "small", "big timeout fired");
        // Also far-but-finite deadlines that overflow Instant arithmetic.
        let huge = Duration::from_secs(u64::MAX / 2);
        let fired = goro::select! {
            recv(after(huge)) -> _t => { "huge" },
            recv(after(Duration::from_millis(5))) -> _t => { "small" },
        };
        assert_eq!(fired, "small", "huge timeout fired");
        assert!(
            !big.is_finished(),
            "sleep(Duration::MAX) returned or panicked"
        );
        drop(big); // detached, asleep forever
    });
}

/// Timeouts of Duration::MAX in send_timeout / recv_timeout behave as
/// "no timeout".
#[test]
fn max_timeouts_on_channels() {
    run(|| {
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || tx.send_timeout(5, Duration::MAX).is_ok());
        assert_eq!(rx.recv_timeout(Duration::MAX).ok(), Some(5));
        assert!(h.join().unwrap());
    });
}

/// TestTick-like: tick(d) has a one-slot buffer, its first tick comes one
/// period after the call, the i-th tick no earlier than i periods, ticks are
/// increasing, and a slow reader never finds more than one tick queued.
#[test]
fn tick_basics() {
    run(|| {
        let period = Duration::from_millis(20);
        let start = Instant::now();
        let rx = tick(period);
        assert_eq!(rx.capacity(), 1);
        let mut prev = start;
        for i in 1..=5u32 {
            let t = rx.recv().unwrap();
            assert!(t >= start + period * i, "tick {i} at {:?}", t - start);
            assert!(t > prev, "ticks not increasing");
            prev = t;
        }
        // Slow reader: ticks are dropped, not queued.
        sleep(period * 5);
        assert!(rx.len() <= 1, "{} ticks queued", rx.len());
        let t = rx.recv().unwrap();
        assert!(t > prev);
        let t2 = rx.recv().unwrap();
        assert!(t2 > t);
        assert!(!rx.is_closed());
    });
}

/// after() works from a plain OS thread (the receive blocks the thread).
#[test]
fn after_from_plain_thread() {
    let d = Duration::from_millis(20);
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let fired = after(d).recv().unwrap();
        (start, fired)
    });
    let (start, fired) = t.join().unwrap();
    assert!(fired >= start + d);
    assert!(start.elapsed() >= d);
}

/// recv_timeout / send_timeout never time out early.
#[test]
fn channel_timeouts_lower_bound() {
    run(|| {
        let d = Duration::from_millis(50);
        let (tx, rx) = chan::<i32>(0);
        let start = Instant::now();
        assert!(matches!(
            rx.recv_timeout(d),
            Err(goro::RecvTimeoutError::Timeout)
        ));
        assert!(start.elapsed() >= d);
        let start = Instant::now();
        match tx.send_timeout(9, d) {
            Err(goro::SendTimeoutError::Timeout(v)) => assert_eq!(v, 9),
            _ => panic!("send_timeout on unbuffered channel without receiver did not time out"),
        }
        assert!(start.elapsed() >= d);
    });
}
