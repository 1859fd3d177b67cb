//! Timer tests ported from Go's time/sleep_test.go and tick_test.go
//! (TestSleep, TestAfter, TestAfterTick, TestAfterQueuing, TestAfterStress,
//! TestSleepZeroDeadlock, TestOverflowSleep, TestTick, TestAfterFunc,
//! TestAfterStop, TestReset, TestTimerStopStress-like, TestTicker,
//! TestTickerStopWithDirectInitialization, TestTeardown) against
//! goro::time::{sleep, after, tick, Timer, Ticker, after_func}, plus Go
//! 1.23's guarantees: timer channels are never closed, no stale value after
//! stop/reset, and timers nobody can observe are released.
//!
//! From Go 1.23's time tests also: TestTimerModifiedEarlier,
//! TestAdjustTimers (both with Go's impl=chan and impl=func timers),
//! TestAfterTimes and TestTickTimes, TestChan (its synchronous-channel
//! path, for Timer and Ticker), TestTickerConcurrentStress,
//! TestLongAdjustTimers (scaled down), and TestChan's "Stop and Reset
//! block old values" as an accounting test under concurrent receivers
//! (`stop_result_accounts_for_every_value`). TestZeroTimer and
//! TestAfterFuncStarvation are in tests/proc.rs (child processes).
//!
//! Only lower bounds on elapsed time are asserted (a timer must never fire
//! early); no test asserts that anything is fast.

mod common;
use common::{run, scale};

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goro::chan;
use goro::time::{after, after_func, sleep, tick, Ticker, Timer};

/// TestSleep: sleep(d) lasts at least d, also while another goroutine's
/// timer fires in the middle.
#[test]
fn sleep_lower_bound() {
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
/// together may be run late by the same amount). The order is that of the
/// fire times the timers deliver, not of the receiving goroutines'
/// reports (Go's): the scheduler does not run readied goroutines in the
/// order they were readied, and on a starved machine (one CPU shared with
/// busy loops) every attempt failed, up to 220 ms apart, with reports
/// such as [0, 1, 1, 3, 2, 4, 8, 5, ...].
#[test]
fn after_queuing() {
    let _w = common::watchdog();
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
        got.sort_by_key(|&(_, t)| t);
        let order: Vec<u32> = got.iter().map(|&(s, _)| s).collect();
        if order.windows(2).any(|w| w[1] < w[0]) {
            let at: Vec<Duration> = got.iter().map(|&(_, t)| t - t0).collect();
            return Err(format!(
                "after() timers fired out of order: {order:?} at {at:?}"
            ));
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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
        // The buffer holds one tick: exactly one is queued (five periods
        // have passed), the rest were dropped. Waited for, not read at
        // once: the ticker's timer may sit in another P's heap whose M a
        // loaded machine runs after this goroutine woke.
        wait_until("a tick queued after a slow read", || rx.len() == 1);
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
    let _w = common::watchdog();
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
    let _w = common::watchdog();
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

/// Waits (polling, bounded) until `cond` holds; panics with `what` after
/// 20 s. Used to wait for a state the runtime reaches asynchronously (a
/// timer value buffered, a ticker released), never as a fixed delay.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(1));
    }
}

/// Go never closes a timer channel: after the value, a second receive
/// blocks (here: times out) and the channel reports open.
#[test]
fn after_channel_is_never_closed() {
    let _w = common::watchdog();
    run(|| {
        let rx = after(Duration::from_millis(1));
        rx.recv().unwrap();
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(30)),
            Err(goro::RecvTimeoutError::Timeout)
        ));
        assert!(!rx.is_closed());
        let t = Timer::new(Duration::from_millis(1));
        t.receiver().recv().unwrap();
        assert!(matches!(
            t.receiver().try_recv(),
            Err(goro::TryRecvError::Empty)
        ));
        assert!(!t.receiver().is_closed());
    });
}

/// Go 1.23: 1M `after(1h)` whose receivers were dropped at once do not
/// stay in the timer heaps (they are collected by the bulk purge). The
/// bound is generous: live timers of concurrent tests plus twice the purge
/// threshold per P.
#[test]
fn dropped_after_timers_are_collected() {
    let _w = common::watchdog();
    run(|| {
        let n = scale(1_000_000);
        for _ in 0..n {
            drop(after(Duration::from_secs(3600)));
        }
        let pending = goro::__private::timers_pending();
        assert!(
            pending < 50_000,
            "{pending} timers pending after {n} dropped after(1h)"
        );
    });
}

/// The same for Timers stopped or reset many times: stale entries go.
#[test]
fn stopped_and_reset_timers_are_collected() {
    let _w = common::watchdog();
    run(|| {
        let t = Timer::new(Duration::from_secs(3600));
        for i in 0..scale(200_000) {
            if i % 2 == 0 {
                t.reset(Duration::from_secs(3600));
            } else {
                t.stop();
            }
        }
        let pending = goro::__private::timers_pending();
        assert!(pending < 50_000, "{pending} timers pending");
        drop(t);
        // Dropped handles are released lazily, by the purge of the heap
        // that holds their entry (the one of the P this goroutine ran on
        // when it armed them; it may migrate, so most, not all, are
        // checked).
        let mut watches = Vec::new();
        for _ in 0..200 {
            let t = Timer::new(Duration::from_secs(3600));
            watches.push(t.__watch());
            drop(t);
            for _ in 0..scale(2_000) {
                drop(after(Duration::from_secs(3600)));
            }
        }
        let released = watches.iter().filter(|w| w.is_released()).count();
        assert!(
            released >= watches.len() / 2,
            "only {released} of {} dropped, unobservable timers released",
            watches.len()
        );
    });
}

/// A timer that never fires (Duration::MAX: a heap entry at i64::MAX, as
/// in Go, so its waiter is asleep, not deadlocked) is active until
/// stopped, and once stopped and dropped it is released like any other:
/// by the purge of the heap that holds its stale entry.
#[test]
fn never_firing_timer_is_released() {
    let _w = common::watchdog();
    run(|| {
        let t = Timer::new(Duration::MAX);
        let w = t.__watch();
        assert!(t.stop(), "a timer that never fires is still active");
        assert!(!t.reset(Duration::MAX));
        assert!(t.stop());
        drop(t);
        let mut added = 0;
        while !w.is_released() && added < 200_000 {
            drop(after(Duration::from_secs(3600)));
            added += 1;
        }
        assert!(w.is_released(), "not released after {added} more timers");
    });
}

/// TestAfterFunc: the function runs in a new goroutine after d, although
/// the Timer was dropped; and it runs again after a reset.
#[test]
fn after_func_runs_in_new_goroutine() {
    let _w = common::watchdog();
    run(|| {
        let me = goro::current_id().unwrap();
        let (tx, rx) = chan::<u64>(4);
        let start = Instant::now();
        let d = Duration::from_millis(20);
        drop(after_func(d, move || {
            tx.send(goro::current_id().expect("after_func: not in a goroutine"))
                .unwrap();
        }));
        let id = rx.recv().unwrap();
        assert!(start.elapsed() >= d, "after_func ran early");
        assert_ne!(id, me);
        // Reset re-arms a timer that already ran (Go).
        let count = Arc::new(AtomicUsize::new(0));
        let (dtx, drx) = chan::<()>(4);
        let c = count.clone();
        let t = after_func(Duration::from_millis(1), move || {
            c.fetch_add(1, SeqCst);
            dtx.send(()).unwrap();
        });
        drx.recv().unwrap();
        assert!(!t.stop(), "stop after the function ran must return false");
        assert!(!t.reset(Duration::from_millis(1)));
        drx.recv().unwrap();
        assert_eq!(count.load(SeqCst), 2);
        // The receiver of an after_func timer never receives.
        assert!(matches!(
            t.receiver().try_recv(),
            Err(goro::TryRecvError::Empty)
        ));
        // ... and is one channel shared by all of them (Go's nil C), not
        // a channel built per timer (h20: 100,000 idle-connection timers).
        let u = after_func(Duration::from_secs(3600), || {});
        assert!(std::ptr::eq(t.receiver(), u.receiver()));
        assert!(u.stop());
        assert!(matches!(
            u.receiver().recv_timeout(Duration::from_millis(1)),
            Err(goro::RecvTimeoutError::Timeout)
        ));
    });
}

/// A stopped and dropped `after_func` timer's heap entry is the last owner
/// of the closure; the entry is discarded where timers run (g0), but the
/// closure's destructor may park, so it must run in a goroutine. The drop
/// is observed from a plain channel, as nothing else is left to observe.
/// (If the timer fired before `stop`, as a stalled machine allows, the
/// round does not test that path: it is repeated.)
#[test]
fn after_func_closure_dropped_in_goroutine() {
    let _w = common::watchdog();
    struct OnDrop(std::sync::mpsc::Sender<Option<u64>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(goro::current_id());
        }
    }
    for _ in 0..100 {
        let (tx, rx) = std::sync::mpsc::channel();
        let stopped = run(move || {
            let d = OnDrop(tx);
            let t = after_func(Duration::from_millis(20), move || {
                let _keep = &d;
            });
            t.stop()
        });
        // The entry is discarded when it comes due (or when a purge meets
        // it); a closure that ran is dropped by its goroutine anyway.
        let who = rx.recv().unwrap();
        if stopped {
            assert!(
                who.is_some(),
                "after_func's closure was dropped off a goroutine"
            );
            return;
        }
    }
    panic!("the after_func timer fired before stop in 100 rounds");
}

/// The same closure dropped by a purge: adding a timer to a heap full of
/// stale entries discards them inside the runtime's critical section
/// (the heap lock, no preemption), where a destructor that parks would
/// sleep with its M marked busy and release the section on another
/// thread. The destructor must run outside it (in a goroutine) and may
/// park. It ran inside it before session 21.
#[test]
fn after_func_closure_dropped_by_a_purge_may_park() {
    let _w = common::watchdog();
    struct OnDrop(goro::Sender<(Option<u64>, bool)>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let critical = goro::__private::in_critical_section();
            // Parks (a timer), which is what must be allowed here.
            sleep(Duration::from_millis(1));
            let _ = self.0.try_send((goro::current_id(), critical));
        }
    }
    run(|| {
        let (tx, rx) = chan(1);
        let d = OnDrop(tx);
        let t = after_func(Duration::from_secs(3600), move || {
            let _keep = &d;
        });
        assert!(t.stop());
        drop(t); // the stale heap entry is now the closure's only owner
                 // Fill this P's heap past its purge threshold (1,024 entries).
        let mut keep = Vec::new();
        while rx.is_empty() && keep.len() < 100_000 {
            keep.push(after(Duration::from_secs(3600)));
        }
        let (who, critical) = rx.recv().unwrap();
        assert!(who.is_some(), "dropped off a goroutine");
        assert!(!critical, "dropped inside a runtime critical section");
    });
}

/// Go's context.WithTimeout on after_func: a timer armed and stopped per
/// request. The heap purges the stale entries as they pile up, and their
/// closures are dropped on the goroutine whose add purged them. Before
/// session 24 they were dropped inside the heap's critical section, where
/// each needed a goroutine of its own: none was dropped in place, and a
/// helper's per-request-timeout server took 3-4x Go's time and 560-755 MB
/// of stacks against Go's 8 MB.
#[test]
fn stopped_after_func_timers_are_freed_in_place() {
    static IN_PLACE: AtomicUsize = AtomicUsize::new(0);
    static ELSEWHERE: AtomicUsize = AtomicUsize::new(0);
    struct OnDrop(Option<u64>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            if goro::current_id() == self.0 {
                IN_PLACE.fetch_add(1, SeqCst);
            } else {
                ELSEWHERE.fetch_add(1, SeqCst);
            }
        }
    }
    run(|| {
        let me = goro::current_id();
        let n = 20_000;
        for _ in 0..n {
            let d = OnDrop(me);
            let t = after_func(Duration::from_secs(3600), move || {
                let _keep = &d;
            });
            assert!(t.stop());
        }
        // Up to twice the purge threshold (1,024) stays in each heap this
        // goroutine used; other tests' adds may purge some of ours.
        let (here, there) = (IN_PLACE.load(SeqCst), ELSEWHERE.load(SeqCst));
        assert!(
            here >= n / 2,
            "{here} of {n} closures dropped by their goroutine ({there} elsewhere)"
        );
    });
}

/// TestAfterStop: stopped timers (func and channel) never fire; stop
/// reports true once, then false. The stops must come before the timers'
/// deadline: a stall that long (a loaded CI machine) lets the after_func
/// timer run (its stop is then rightly false), so such a round is
/// repeated with timers twice as long; a stop that always says false
/// still fails.
#[test]
fn after_stop() {
    let _w = common::watchdog();
    run(|| {
        for round in 0..8u32 {
            let d = Duration::from_millis(20) * (1 << round);
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            let f = after_func(d, move || {
                r.fetch_add(1, SeqCst);
            });
            let t0 = Timer::new(d);
            // Both stopped while active (a channel timer whose value is
            // unreceived is active too, Go 1.23).
            let (f_stopped, t0_stopped) = (f.stop(), t0.stop());
            if !f_stopped {
                println!("round {round}: after_func({d:?}) ran before stop; again, longer");
                continue;
            }
            assert!(
                t0_stopped,
                "stop of an unreceived Timer({d:?}) said inactive"
            );
            // Wait well past both deadlines for a third timer.
            let t1 = Timer::new(d * 3);
            t1.receiver().recv().unwrap();
            assert_eq!(ran.load(SeqCst), 0, "stopped after_func ran");
            assert!(matches!(
                t0.receiver().try_recv(),
                Err(goro::TryRecvError::Empty)
            ));
            assert!(!f.stop());
            assert!(!t0.stop());
            assert!(!t1.stop(), "t1's value was received: not active");
            return;
        }
        panic!("after_func ran before its stop in every round (up to 2.56 s)");
    });
}

/// TestReset: reset(d) of an active timer returns true and the value comes
/// no earlier than d after the reset; reset of an expired-and-received
/// timer returns false.
#[test]
fn timer_reset() {
    let _w = common::watchdog();
    run(|| {
        let d = Duration::from_millis(30);
        let t = Timer::new(Duration::from_millis(10));
        let at = Instant::now();
        assert!(t.reset(d));
        let v = t.receiver().recv().unwrap();
        assert!(v >= at + d, "reset timer fired after {:?}", v - at);
        assert!(!t.reset(Duration::from_millis(1)));
        t.receiver().recv().unwrap();
    });
}

/// Go 1.23: a timer that fired but whose value was not received is still
/// active: stop returns true and discards the value; reset likewise, and
/// only the new value arrives.
#[test]
fn stop_and_reset_discard_an_unreceived_value() {
    let _w = common::watchdog();
    run(|| {
        let t = Timer::new(Duration::from_millis(1));
        wait_until("the timer's value", || t.receiver().len() == 1);
        assert!(t.stop(), "stop of a fired, unreceived timer must be true");
        assert!(matches!(
            t.receiver().try_recv(),
            Err(goro::TryRecvError::Empty)
        ));
        assert!(!t.stop());

        let t = Timer::new(Duration::from_millis(1));
        wait_until("the timer's value", || t.receiver().len() == 1);
        let at = Instant::now();
        assert!(t.reset(Duration::from_millis(20)));
        let v = t.receiver().recv().unwrap();
        assert!(v >= at + Duration::from_millis(20), "stale value received");
    });
}

/// Stop/reset racing with the timer firing (on another P): whatever the
/// interleaving, stop of a never-received timer returns true and nothing
/// is received afterwards.
#[test]
fn stop_races_fire() {
    let _w = common::watchdog();
    run(|| {
        for i in 0..scale(2_000) {
            let t = Timer::new(Duration::from_micros((i % 50) as u64));
            for _ in 0..(i % 7) * 100 {
                std::hint::spin_loop();
            }
            if i % 2 == 0 {
                assert!(t.stop(), "iteration {i}: stop returned false");
            } else {
                assert!(
                    t.reset(Duration::from_secs(3600)),
                    "iteration {i}: reset returned false"
                );
            }
            assert!(
                t.receiver().try_recv().is_err(),
                "iteration {i}: a value from before stop/reset was received"
            );
        }
    });
}

/// TestTicker: ticks come no earlier than i periods, increasing; after
/// stop no tick arrives (not even one buffered before the stop); reset
/// restarts it.
#[test]
fn ticker_stop_and_reset() {
    let _w = common::watchdog();
    run(|| {
        let period = Duration::from_millis(10);
        let start = Instant::now();
        let tk = Ticker::new(period);
        let mut prev = start;
        for i in 1..=3u32 {
            let t = tk.receiver().recv().unwrap();
            assert!(t >= start + period * i);
            assert!(t > prev);
            prev = t;
        }
        wait_until("a buffered tick", || tk.receiver().len() == 1);
        tk.stop();
        assert!(tk.receiver().is_empty(), "stop left a buffered tick");
        assert!(matches!(
            tk.receiver().recv_timeout(period * 5),
            Err(goro::RecvTimeoutError::Timeout)
        ));
        let at = Instant::now();
        tk.reset(period * 2);
        let t = tk.receiver().recv().unwrap();
        assert!(t >= at + period * 2, "tick after reset came early");
        let t2 = tk.receiver().recv().unwrap();
        assert!(t2 >= t + period * 2 - Duration::from_millis(1) || t2 > t);
        tk.stop();
    });
}

/// TestTickerStopWithDirectInitialization-ish: stop and reset are safe in
/// any order and any number of times; a stopped ticker's channel stays open.
#[test]
fn ticker_stop_is_idempotent() {
    let _w = common::watchdog();
    run(|| {
        let tk = Ticker::new(Duration::from_secs(3600));
        tk.stop();
        tk.stop();
        tk.reset(Duration::from_secs(3600));
        tk.stop();
        assert!(!tk.receiver().is_closed());
        let never = Ticker::new(Duration::MAX);
        never.stop();
        never.reset(Duration::MAX);
    });
}

/// TestTeardown: create a ticker, take one tick, stop it; repeatedly, with
/// short periods.
#[test]
fn ticker_teardown() {
    let _w = common::watchdog();
    run(|| {
        for i in 0..scale(60) {
            let tk = Ticker::new(Duration::from_micros(100 + 50 * (i as u64 % 5)));
            tk.receiver().recv().unwrap();
            tk.stop();
        }
    });
}

/// Go 1.23: a ticker whose handle and receivers are all dropped stops by
/// itself and is released; one whose receiver clone is kept goes on.
#[test]
fn dropped_ticker_stops() {
    let _w = common::watchdog();
    run(|| {
        let tk = Ticker::new(Duration::from_millis(1));
        let w = tk.__watch();
        tk.receiver().recv().unwrap();
        drop(tk);
        wait_until("the dropped ticker to be released", || w.is_released());

        let tk = Ticker::new(Duration::from_millis(1));
        let w = tk.__watch();
        let rx = tk.receiver().clone();
        drop(tk);
        rx.recv().unwrap();
        rx.recv().unwrap();
        assert!(!w.is_released(), "ticker stopped while a receiver lives");
        drop(rx);
        wait_until("the ticker to be released", || w.is_released());

        // tick(): dropping the only receiver stops it too.
        let rx = tick(Duration::from_millis(1));
        rx.recv().unwrap();
        drop(rx);
    });
}

/// sleep(ZERO) returns at once, also from a plain thread.
#[test]
fn sleep_zero_returns_at_once() {
    let _w = common::watchdog();
    sleep(Duration::ZERO);
    run(|| {
        for _ in 0..1000 {
            sleep(Duration::ZERO);
        }
    });
}

/// Timers and tickers work from plain OS threads too.
#[test]
fn timer_from_plain_thread() {
    let _w = common::watchdog();
    let h = std::thread::spawn(|| {
        let t = Timer::new(Duration::from_millis(5));
        t.receiver().recv().unwrap();
        let t = Timer::new(Duration::from_secs(3600));
        assert!(t.stop());
        let tk = Ticker::new(Duration::from_millis(2));
        tk.receiver().recv().unwrap();
        tk.stop();
    });
    h.join().unwrap();
}

/// `Timer::recv` and `Ticker::recv` (Go's `<-t.C`): each value is the
/// firing time, never before the deadline; tick i comes i periods after
/// the start at the earliest, in order (the schedule, not the previous
/// delivery, sets the next: Go's rule); a tick buffered while nobody
/// waited is returned at once (with its own, earlier time); from a
/// goroutine and from a plain thread.
#[test]
fn timer_and_ticker_recv() {
    let _w = common::watchdog();
    let check = || {
        let d = Duration::from_millis(5);
        let t0 = Instant::now();
        let t = Timer::new(d);
        let fired = t.recv();
        assert!(
            fired >= t0 + d,
            "timer value {:?} before its deadline",
            fired - t0
        );

        // t0 before the ticker exists: its ticks are due on the grid from
        // its creation, so a t0 read after it could be later than a tick's
        // due time minus its period (qemu, h41: "tick 3 at 14.932234ms,
        // before 15ms").
        let t0 = Instant::now();
        let tk = Ticker::new(d);
        let mut last = t0;
        for i in 1..=3u32 {
            let at = tk.recv();
            assert!(
                at >= t0 + d * i,
                "tick {i} at {:?}, before {:?}",
                at - t0,
                d * i
            );
            assert!(at > last, "tick {i} not after the one before");
            last = at;
        }
        // A tick delivered into the buffer while nobody waits is kept, and
        // recv returns it (its time is before we looked), not a later one.
        while tk.receiver().is_empty() {
            sleep(Duration::from_millis(1));
        }
        let seen = Instant::now();
        let buffered = tk.recv();
        assert!(
            buffered > last && buffered <= seen,
            "recv did not return the buffered tick"
        );
        tk.stop();
    };
    run(check);
    check(); // outside the runtime: a plain thread blocks
}

/// Goroutines that reset and stop their timers in a loop are preempted
/// (SIGURG) now and then inside `reset`/`stop`; the timer's lock is a
/// runtime lock, so that never happens while they hold it. Before session
/// 21 it could: the M firing that timer then blocked on the lock while
/// holding its P, and the preempted holder, pinned, waited for a P for
/// ever (10 of 10 runs of this at GOMAXPROCS=2 deadlocked).
#[test]
fn timer_reset_and_stop_under_preemption() {
    let _w = common::watchdog();
    run(|| {
        let end = Instant::now() + Duration::from_millis(if common::qemu() { 3000 } else { 1500 });
        let hs: Vec<_> = (0..4u64)
            .map(|k| {
                goro::spawn(move || {
                    let t = Timer::new(Duration::from_micros(10));
                    let mut i = 0u64;
                    while Instant::now() < end {
                        // Short timers, so that Ms keep firing them.
                        t.reset(Duration::from_micros(1 + (i * 7 + k) % 40));
                        if i % 3 == 0 {
                            t.stop();
                        }
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap() > 0);
        }
    });
}

/// A goroutine whose P is detached (REQ_PREEMPT_OR_DETACH: sysmon's request
/// for a G that keeps refusing preemption in foreign code) between
/// `sleep`'s check that it may park and the park: `sleep` reads the clock
/// in between, in the vDSO, where that request detaches. The park must
/// take a P back first. Before, park_m found the G in Syscall and threw
/// "casgstatus: bad transition Running -> Waiting (status is 0x3)"
/// (`ticker_concurrent_stress`, 7 of 60 runs pinned to one CPU beside two
/// busy loops; this test, every run). A plain thread keeps sending the
/// request to the sleeper's M; the scenario is shown to have happened by
/// the detached goroutines that took a P back (bounded: 20 s).
#[test]
fn sleep_detached_before_it_parks() {
    use std::sync::atomic::AtomicBool;
    let _w = common::watchdog();
    run(|| {
        let m = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let sender = {
            let (m, done) = (m.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(SeqCst) {
                    let t = m.load(SeqCst);
                    if t != 0 {
                        goro::__private::send_preempt_or_detach_signal(t);
                    }
                    std::hint::spin_loop();
                }
            })
        };
        let before = goro::stats().reacquires_detected;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut sleeps = 0u64;
        while (sleeps < 20_000 || goro::stats().reacquires_detected < before + 100)
            && Instant::now() < deadline
        {
            m.store(goro::__private::current_m(), SeqCst);
            sleep(Duration::from_nanos(1));
            sleeps += 1;
        }
        done.store(true, SeqCst);
        goro::blocking(|| sender.join().unwrap());
        let detached = goro::stats().reacquires_detected - before;
        println!("{sleeps} sleeps, {detached} detached goroutines took a P back");
        assert!(
            detached > 0,
            "no detach in {sleeps} sleeps: the scenario never happened"
        );
    });
}

// ---------------------------------------------------------------------------
// Ports of the timer tests Go added up to 1.23 (time/sleep_test.go,
// time/tick_test.go).

/// Bound for "this must eventually arrive" waits: a hang detector, not a
/// speed assertion (Go's tests bound the same waits with 1-10 s).
fn patience() -> Duration {
    Duration::from_secs(if common::qemu() { 120 } else { 20 })
}

/// A small xorshift generator (no rand dependency), seeded from the clock;
/// the seed goes into every failure message.
struct Rng(u64);

impl Rng {
    fn from_clock() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng(nanos | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Go's `newTimerFunc`: a timer built on after_func whose function sends
/// the time on its own one-slot channel, so the runtime's timer-channel
/// path is bypassed (Go 1.23 runs its timer tests both ways).
fn new_timer_func(d: Duration) -> (Timer, goro::Receiver<Instant>) {
    let (tx, rx) = chan::<Instant>(1);
    let t = after_func(d, move || {
        // The test may have dropped the receiver: nothing to deliver to.
        let _ = tx.send(Instant::now());
    });
    (t, rx)
}

/// A channel Timer with its receiver, the same shape as [`new_timer_func`].
fn new_timer_chan(d: Duration) -> (Timer, goro::Receiver<Instant>) {
    let t = Timer::new(d);
    let rx = t.receiver().clone();
    (t, rx)
}

/// TestTimerModifiedEarlier (Go 1.23, impl=chan and impl=func; Go issue
/// 47329): a timer moved from an hour to "now" ten times in a row, with a
/// stop (and a drain if stop says it already ran) before each reset, still
/// fires. Go's "past" is a negative duration; here zero. The 10 s deadline
/// is Go's hang detector, kept.
#[test]
fn timer_modified_earlier() {
    let _w = common::watchdog();
    run(|| {
        for (name, new) in [
            ("chan", new_timer_chan as fn(Duration) -> _),
            ("func", new_timer_func),
        ] {
            for i in 0..scale(1000) {
                let (timer, rx) = new(Duration::from_secs(3600));
                for _ in 0..10 {
                    if !timer.stop() {
                        rx.recv().unwrap();
                    }
                    timer.reset(Duration::ZERO);
                }
                goro::select! {
                    recv(rx) -> v => { v.unwrap(); },
                    recv(after(Duration::from_secs(10))) -> _ => {
                        panic!("impl={name} iteration {i}: timer moved earlier never fired")
                    },
                }
            }
        }
    });
}

/// TestAdjustTimers (Go 1.23, impl=chan and impl=func; Go issue 47762):
/// 100 timers, each driven through fire, receive, reset to 1-3 minutes,
/// stop, reset to zero and receive, in a random interleaving across the
/// timers; moving timers earlier and later must lose none. Deviations:
/// stop of a minute-long timer is asserted to return true (Go only logs),
/// and the final receive is bounded by `patience()` (a lost move leaves it
/// waiting for minutes) instead of Go's 750 ms.
#[test]
fn adjust_timers() {
    let _w = common::watchdog();
    run(|| {
        for (name, new) in [
            ("chan", new_timer_chan as fn(Duration) -> _),
            ("func", new_timer_func),
        ] {
            let mut rng = Rng::from_clock();
            let seed = rng.0;
            let n = 100;
            let mut timers: Vec<Option<(Timer, goro::Receiver<Instant>)>> =
                (0..n).map(|_| None).collect();
            let mut states = vec![0usize; n];
            let mut indices: Vec<usize> = (0..n).collect();
            while !indices.is_empty() {
                let ii = rng.below(indices.len());
                let i = indices[ii];
                let state = states[i];
                states[i] += 1;
                let ctx = format!("impl={name} seed={seed} timer {i} state {state}");
                if state == 0 {
                    timers[i] = Some(new(Duration::ZERO));
                    continue;
                }
                let (timer, rx) = timers[i].as_ref().unwrap();
                let minute = Duration::from_secs(60);
                match state {
                    // Timer is now idle.
                    1 => drop(rx.recv().unwrap()),
                    // Reset to various long durations, which we'll cancel.
                    2 | 4 | 6 => {
                        let d = minute * [1, 3, 2][state / 2 - 1];
                        assert!(!timer.reset(d), "{ctx}: reset of an idle timer said active");
                    }
                    // Stop a long-duration timer.
                    3 | 5 | 7 => {
                        assert!(timer.stop(), "{ctx}: stop of a minute-long timer said idle")
                    }
                    // Start a short-duration timer.
                    8 => assert!(!timer.reset(Duration::ZERO), "{ctx}: reset returned true"),
                    9 => {
                        rx.recv_timeout(patience()).unwrap_or_else(|e| {
                            panic!("{ctx}: timer reset to zero did not fire: {e:?}")
                        });
                    }
                    // Timer is done. Swap with tail and remove.
                    _ => {
                        indices.swap_remove(ii);
                    }
                }
            }
        }
    });
}

/// TestAfterTimes and TestTickTimes (Go 1.23): a reader that comes late
/// gets the time the timer fired, not the time it looked. Go retries ten
/// times with a 400 ms threshold; here the check is structural: the value
/// lies between the deadline and the moment the reader started receiving.
#[test]
fn after_and_tick_values_are_fire_times() {
    let _w = common::watchdog();
    run(|| {
        let d = Duration::from_millis(10);
        let start = Instant::now();
        let timer = Timer::new(d);
        let chans = [
            ("after", after(d)),
            ("tick", tick(d)),
            ("Timer", timer.receiver().clone()),
        ];
        // The subject of the test, not synchronisation: read late.
        sleep(d * 10);
        let looked = Instant::now();
        for (what, rx) in &chans {
            let v = rx.recv().unwrap();
            assert!(
                v >= start + d,
                "{what}: value {:?} before the deadline",
                v - start
            );
            assert!(
                v < looked,
                "{what}: value {:?} after start is the receive time (reader looked at {:?}), \
                 not the fire time",
                v - start,
                looked - start
            );
        }
    });
}

/// Go's `timer` interface in TestChan: Timer and Ticker with Stop/Reset
/// returning "pending"; for a Ticker (Go's tickerTimer) that is "was not
/// stopped".
enum Tim {
    Timer(Timer),
    Ticker(Ticker, std::cell::Cell<bool>),
}

impl Tim {
    fn stop(&self) -> bool {
        match self {
            Tim::Timer(t) => t.stop(),
            Tim::Ticker(t, stopped) => {
                t.stop();
                !stopped.replace(true)
            }
        }
    }
    fn reset(&self, d: Duration) -> bool {
        match self {
            Tim::Timer(t) => t.reset(d),
            Tim::Ticker(t, stopped) => {
                t.reset(d);
                !stopped.replace(false)
            }
        }
    }
    fn rx(&self) -> goro::Receiver<Instant> {
        match self {
            Tim::Timer(t) => t.receiver().clone(),
            Tim::Ticker(t, _) => t.receiver().clone(),
        }
    }
}

/// TestChan's testTimerChan with Go 1.23 synchronous timer channels
/// (asynctimerchan=0): stop/reset with and without goroutines blocked on
/// the channel (plain receive and select), goroutines blocked on a
/// stopped timer's channel get nothing, and no value from before a
/// stop/reset is ever received. Deviations: "a goroutine is blocked on
/// <-C" is established with `wait_parked` instead of Go's sleeps, "a tick
/// is buffered" with `wait_until`; the remaining short sleeps only give a
/// wrong delivery the chance to show itself before a "no tick" check;
/// waits for a tick are bounded by `patience()` (Go: 100 x 10 ms).
fn check_timer_chan(tim: &Tim) {
    let is_ticker = matches!(tim, Tim::Ticker(..));
    let c = tim.rx();
    let sched = Duration::from_millis(10);
    let far = Duration::from_secs(10_000);
    let ns = Duration::from_nanos(1);
    let no_tick = |what: &str| {
        assert!(
            matches!(c.try_recv(), Err(goro::TryRecvError::Empty)),
            "extra tick: {what}"
        )
    };
    let assert_tick = |what: &str| {
        c.recv_timeout(patience())
            .unwrap_or_else(|e| panic!("missing tick: {what}: {e:?}"));
    };

    // Simple stop; timer never in heap.
    tim.stop();
    no_tick("after the first stop");
    // Modify of a timer not in the heap.
    tim.reset(far);
    no_tick("after reset far");
    // Modify of a timer in the heap.
    tim.reset(ns);
    sleep(sched);
    assert_tick("after reset(1ns)");

    // A ticker ticks again meanwhile (a tick sits in the buffer); the reset
    // must discard it.
    if is_ticker {
        wait_until("a buffered tick", || c.len() == 1);
    }
    tim.reset(far);
    no_tick("stale tick after reset far");

    // Stop and reset while a goroutine is blocked on <-C.
    tim.reset(far);
    let (done_tx, done_rx) = chan::<()>(0);
    let g = {
        let c = c.clone();
        goro::spawn(move || {
            c.recv().unwrap();
            drop(done_tx);
        })
    };
    common::wait_parked(g.id());
    assert!(done_rx.try_recv().is_err(), "early done");
    tim.reset(far * 2);
    sleep(sched);
    assert!(done_rx.try_recv().is_err(), "early done after reset far");
    // Imminent reset while in the heap.
    tim.reset(ns);
    assert!(
        matches!(
            done_rx.recv_timeout(patience()),
            Err(goro::RecvTimeoutError::Closed)
        ),
        "the blocked receiver never got the tick"
    );
    g.join().unwrap();
    // A ticker (1 ns apart) has ticked again; a timer has stopped.
    if is_ticker {
        assert_tick("second tick of a 1ns ticker");
    } else {
        sleep(sched);
        no_tick("a timer fired twice");
    }
    tim.stop();
    no_tick("after stop");

    // Again with two goroutines waiting in select.
    tim.reset(far);
    let (done_tx, done_rx) = chan::<()>(2);
    let (stop_tx, stop_rx) = chan::<()>(0);
    let gs: Vec<_> = (0..2)
        .map(|_| {
            let (c, done_tx, stop_rx) = (c.clone(), done_tx.clone(), stop_rx.clone());
            goro::spawn(move || {
                goro::select! {
                    recv(c) -> v => { v.unwrap(); done_tx.send(()).unwrap(); },
                    recv(stop_rx) -> _ => {},
                }
            })
        })
        .collect();
    for g in &gs {
        common::wait_parked(g.id());
    }
    assert!(done_rx.try_recv().is_err(), "early done (select)");
    tim.reset(sched / 2);
    done_rx
        .recv_timeout(patience())
        .expect("no select receiver got the tick");
    tim.stop();
    stop_tx.close();
    for g in gs {
        g.join().unwrap();
    }
    if is_ticker {
        // The second waiter may have taken a second tick before the stop.
        let _ = done_rx.try_recv();
    }
    assert!(
        done_rx.try_recv().is_err(),
        "a timer woke two select receivers"
    );
    no_tick("tick after stop (select)");

    // Goroutines blocked on a stopped timer's channel get nothing.
    let (stop_tx, stop_rx) = chan::<()>(0);
    let gs: Vec<_> = (0..2)
        .map(|_| {
            let (c, stop_rx) = (c.clone(), stop_rx.clone());
            goro::spawn(move || {
                goro::select! {
                    recv(c) -> _ => panic!("unexpected data from a stopped timer"),
                    recv(stop_rx) -> _ => {},
                }
            })
        })
        .collect();
    for g in &gs {
        common::wait_parked(g.id());
    }
    sleep(sched);
    stop_tx.close();
    for g in gs {
        g.join().unwrap();
    }

    // Stop and Reset block old values from being received (Go issue 37196).
    tim.reset(ns);
    wait_until("the fired value", || c.len() == 1);
    assert!(
        tim.stop(),
        "stop of a fired, unreceived timer must say pending"
    );
    no_tick("value from before stop");
    tim.reset(Duration::from_secs(3600));
    no_tick("after reset(1h)");
    assert!(tim.reset(ns), "reset of an armed timer must say pending");
    assert_tick("after reset(1ns)");
    sleep(sched);
    if is_ticker {
        assert_tick("ticker keeps ticking");
        sleep(sched);
    } else {
        no_tick("timer fired twice");
    }
    assert_eq!(
        tim.reset(Duration::from_secs(3600)),
        is_ticker,
        "pending after the last tick"
    );
    no_tick("after the last reset");
    tim.stop();
}

/// TestChan (Go 1.23, time/tick_test.go), Timer half.
#[test]
fn timer_chan_sync_semantics() {
    let _w = common::watchdog();
    run(|| check_timer_chan(&Tim::Timer(Timer::new(Duration::from_secs(10_000)))));
}

/// TestChan (Go 1.23, time/tick_test.go), Ticker half.
#[test]
fn ticker_chan_sync_semantics() {
    let _w = common::watchdog();
    run(|| {
        let t = Ticker::new(Duration::from_secs(10_000));
        check_timer_chan(&Tim::Ticker(t, std::cell::Cell::new(false)))
    });
}

/// TestTickerConcurrentStress (Go 1.23): ten goroutines receive 100 ticks
/// each from one 1 ns ticker while another goroutine keeps sleeping 1 ns
/// (Go's loop calls runtime.GC too; goro has none).
#[test]
fn ticker_concurrent_stress() {
    let _w = common::watchdog();
    run(|| {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sleeper = {
            let stop = stop.clone();
            goro::spawn(move || {
                while !stop.load(SeqCst) {
                    sleep(Duration::from_nanos(1));
                }
            })
        };
        let ticker = Ticker::new(Duration::from_nanos(1));
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let c = ticker.receiver().clone();
                goro::spawn(move || {
                    let mut last = None;
                    for _ in 0..scale(100).max(10) {
                        let t = c.recv().unwrap();
                        // One receiver's ticks come in order.
                        assert!(last.map_or(true, |l| t >= l), "ticks out of order");
                        last = Some(t);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        ticker.stop();
        stop.store(true, SeqCst);
        sleeper.join().unwrap();
    });
}

/// TestLongAdjustTimers (Go 1.23): with a large timer heap built by many
/// short sleepers, a queueing goroutine ping-pongs work items through
/// select (its send case disabled while its queue is empty, Go's nil
/// channel: here a channel nobody receives on) and every item arrives, in
/// order, each within Go's 5 s `after` bound, all within Go's 60 s
/// after_func deadline (hang detectors). Go's 5000 sleepers; 5000 rounds
/// of 20 items (Go 50000); a tenth of both under qemu.
#[test]
fn long_adjust_timers() {
    let _w = common::watchdog();
    run(|| {
        let count = scale(5000);
        let sleepers: Vec<_> = (0..count)
            .map(|_| goro::spawn(|| sleep(Duration::from_micros(10))))
            .collect();
        for _ in 0..count {
            sleep(Duration::from_micros(1));
        }
        let (done_tx, done_rx) = chan::<()>(0);
        let deadline = after_func(Duration::from_secs(60), move || done_tx.close());
        let (in_tx, in_rx) = chan::<u64>(0);
        let (out_tx, out_rx) = chan::<u64>(0);
        let queue = {
            let done_rx = done_rx.clone();
            goro::spawn(move || {
                let (nil_tx, _nil_rx) = chan::<u64>(0);
                let mut q = std::collections::VecDeque::new();
                loop {
                    let (to, v) = match q.front() {
                        Some(&v) => (&out_tx, v),
                        None => (&nil_tx, 0),
                    };
                    goro::select! {
                        send(to, v) -> r => { r.unwrap(); q.pop_front(); },
                        recv(in_rx) -> f => match f {
                            Ok(f) => q.push_back(f),
                            Err(_) => return,
                        },
                        recv(done_rx) -> _ => return,
                    }
                }
            })
        };
        const TRY: u64 = 20;
        for i in 0..scale(5000) as u64 {
            for k in 0..TRY {
                in_tx.send(i * TRY + k).unwrap();
            }
            for k in 0..TRY {
                goro::select! {
                    recv(out_rx) -> v => assert_eq!(v.expect("output channel is closed"), i * TRY + k),
                    recv(after(Duration::from_secs(5))) -> _ => panic!("failed to read work, iteration {i}"),
                    recv(done_rx) -> _ => panic!("timer expired"),
                }
            }
        }
        in_tx.close();
        queue.join().unwrap();
        assert!(deadline.stop(), "the 60 s deadline fired");
        for s in sleepers {
            s.join().unwrap();
        }
    });
}

/// TestChan's last part (Go 1.23, "Stop and Reset block old values from
/// being received", Go issue 37196), under concurrency: a timer is reset to
/// a few microseconds and stopped, thousands of times, while four
/// goroutines wait for its values (in select, or in recv_timeout loops).
/// Every value is either received exactly once, and then that round's
/// `stop` returned false, or discarded, and then it returned true: the
/// count of received values equals the count of false stops. Also for an
/// after_func timer (its function runs once per false stop). Deviation: Go
/// checks single steps with sleeps; here random timing, checked by
/// accounting.
#[test]
fn stop_result_accounts_for_every_value() {
    let _w = common::watchdog();
    run(|| {
        for mode in ["select", "recv_timeout", "after_func"] {
            let got = Arc::new(AtomicUsize::new(0));
            let t = if mode == "after_func" {
                let got = got.clone();
                after_func(Duration::from_secs(3600), move || {
                    got.fetch_add(1, SeqCst);
                })
            } else {
                Timer::new(Duration::from_secs(3600))
            };
            assert!(t.stop());
            let (quit_tx, quit_rx) = chan::<()>(0);
            let receivers: Vec<_> = (0..if mode == "after_func" { 0 } else { 4 })
                .map(|_| {
                    let (c, got, quit_rx) = (t.receiver().clone(), got.clone(), quit_rx.clone());
                    goro::spawn(move || loop {
                        if mode == "select" {
                            goro::select! {
                                recv(c) -> v => { v.unwrap(); got.fetch_add(1, SeqCst); },
                                recv(quit_rx) -> _ => return,
                            }
                        } else {
                            match c.recv_timeout(Duration::from_micros(50)) {
                                Ok(_) => {
                                    got.fetch_add(1, SeqCst);
                                }
                                Err(_) if quit_rx.is_closed() => return,
                                Err(_) => {}
                            }
                        }
                    })
                })
                .collect();
            let mut rng = Rng::from_clock();
            let seed = rng.0;
            let mut false_stops = 0;
            let rounds = scale(5_000);
            for _ in 0..rounds {
                t.reset(Duration::from_micros(rng.below(10) as u64));
                for _ in 0..rng.below(1500) {
                    std::hint::spin_loop();
                }
                if rng.below(4) == 0 {
                    goro::yield_now();
                }
                if !t.stop() {
                    false_stops += 1;
                }
            }
            // A receiver that took a value counts it before it waits again,
            // and after the last stop no value can arrive: once they have
            // all seen `quit`, the count is final.
            quit_tx.close();
            for r in receivers {
                r.join().unwrap();
            }
            if mode == "after_func" {
                // stop() == false means f was started, maybe not yet run.
                wait_until("the started after_func goroutines", || {
                    got.load(SeqCst) >= false_stops
                });
            }
            assert_eq!(
                got.load(SeqCst),
                false_stops,
                "{mode} (seed {seed}): values received vs stop() == false"
            );
        }
    });
}

/// Go 1.23 keeps a stopped timer's heap entry (a zombie) and a reset to a
/// later time reuses the queued entry (timerModifiedLater), so the idle
/// timeout idiom `if !t.stop() { <-t.c }; t.reset(d)` per message queues
/// nothing new. goro did push an entry per reset (1,000 stale ones
/// between purges, and 2x Go's cost per message) until session 22. The
/// timer still fires, at the last time it was reset to.
#[test]
fn stop_then_reset_later_reuses_the_queued_entry() {
    let _w = common::watchdog();
    run(|| {
        let t = Timer::new(Duration::from_secs(3600));
        let w = t.__watch();
        for i in 0..scale(10_000) {
            if !t.stop() {
                t.receiver().recv().unwrap();
            }
            // Later every time (a fixed idle timeout from "now").
            t.reset(Duration::from_secs(3600 + i as u64));
        }
        // The handle plus the one queued entry.
        assert_eq!(w.refs(), 2, "heap entries queued for one timer");
        // An earlier time needs a new entry; the old one goes stale.
        let start = Instant::now();
        assert!(t.reset(Duration::from_millis(5)));
        t.receiver().recv().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(5));
        assert!(!t.stop(), "fired and received");
    });
}

/// A zero ticker period is a programming error, as in Go: `Ticker::new`
/// and `Ticker::reset` panic with Go's message (a reset leaves the ticker
/// ticking at its old period), and `tick(ZERO)` gives a channel that never
/// receives (Go's nil channel). Before session 25 zero meant 1 ns: a
/// ticker built from a configuration value of 0 kept a CPU busy even with
/// nobody reading it (h14).
#[test]
fn zero_ticker_period_panics_or_never_ticks() {
    run(|| {
        let msg = |r: std::thread::Result<()>| -> String {
            let p = r.expect_err("must panic");
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap()
        };
        let r = std::panic::catch_unwind(|| {
            Ticker::new(Duration::ZERO);
        });
        assert_eq!(msg(r), "non-positive interval for NewTicker");
        let t = Ticker::new(Duration::from_millis(1));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.reset(Duration::ZERO);
        }));
        assert_eq!(msg(r), "non-positive interval for Ticker.Reset");
        t.recv();
        t.recv();
        let rx = tick(Duration::ZERO);
        assert_eq!(rx.try_recv(), Err(goro::TryRecvError::Empty));
        goro::select! {
            recv(rx) -> _ => panic!("a zero-period tick channel received"),
            recv(after(Duration::from_millis(20))) -> _ => {}
        }
    });
}

/// A stopped `after_func` timer whose handle is dropped is released by the
/// heap purge of whichever goroutine next adds a timer there; a panic in its
/// closure's destructor is reported and contained, not unwound into that
/// unrelated caller. Before (h41): it came out of the `after(..)` call
/// whose add purged the heap ("1 timer operations panicked"); out of a
/// socket read's deadline it left the poll descriptor claimed, and the
/// socket's next read died with "fatal error: netpoll: double wait on a
/// poll descriptor" (/work/scratch/h41/src/bin/p13.rs).
#[test]
fn panicking_after_func_closure_destructor_is_contained() {
    let _w = common::watchdog();
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
            panic!("an after_func closure's destructor panicked (expected)");
        }
    }
    run(|| {
        let p = PanicOnDrop;
        let t = after_func(Duration::from_secs(3600), move || {
            let _keep = &p;
        });
        assert!(t.stop());
        drop(t); // the stale heap entry is now the closure's only owner
                 // Fill this P's heap past its purge threshold (1,024 entries): the
                 // purge that drops the entry runs in one of these adds (or, if
                 // another test's goroutine purges it, there).
        let (mut keep, mut surfaced) = (Vec::new(), 0);
        while DROPS.load(SeqCst) == 0 && keep.len() < 100_000 {
            match std::panic::catch_unwind(|| after(Duration::from_secs(3600))) {
                Ok(rx) => keep.push(rx),
                Err(_) => surfaced += 1,
            }
        }
        assert_eq!(surfaced, 0, "{surfaced} timer operations panicked");
        assert_eq!(DROPS.load(SeqCst), 1, "the closure was not dropped");
    });
}
