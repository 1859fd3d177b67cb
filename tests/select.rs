//! `select!` tests ported from Go's runtime/chan_test.go (TestSelectFairness,
//! TestSelectDuplicateChannel, TestSelfSelect, TestSelectStress,
//! TestChanSendInterface, TestPseudoRandomSend) plus the goro-specific
//! contract: `default`, `select!` as an expression, `break`/`return`/`?` in
//! arms, closed channels and dropped receivers in send arms, the
//! `recv(goro::time::after(d))` timeout idiom, one channel in several arms,
//! and select from a plain OS thread.
//!
//! Also ported: TestSelectStackAdjust (goro's stack shrinker in place of
//! Go's GC), and two of chan_test.go's benchmarks as tests with exact
//! accounting: BenchmarkChanPopular (`select_popular_channel`) and
//! BenchmarkSelectProdCons (`select_prod_cons_with_timers`).
//!
//! Go's nil channel (a case that can never proceed) is emulated by a fresh
//! channel whose other end is kept alive but never used.

mod common;
use common::{aggressive_shrink, run, scale, stack_growth_recursive};

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goro::{chan, RecvError, SendError};

/// Give other goroutines a chance to run. Never used to order events: the
/// tests below are correct under any interleaving; this only makes the
/// interesting interleaving likely (as Go's tests do with time.Sleep).
fn let_others_run() {
    for _ in 0..8 {
        goro::yield_now();
    }
    goro::time::sleep(Duration::from_millis(1));
}

/// |count/trials - p| must stay within 7 standard deviations: essentially
/// never fails for a uniform choice, always fails for "first ready case".
fn assert_uniformish(counts: &[usize], what: &str) {
    let trials: usize = counts.iter().sum();
    let p = 1.0 / counts.len() as f64;
    let sigma = (trials as f64 * p * (1.0 - p)).sqrt();
    let expect = trials as f64 * p;
    println!("{what}: counts {counts:?}");
    for (i, &c) in counts.iter().enumerate() {
        assert!(
            (c as f64 - expect).abs() <= 7.0 * sigma,
            "{what}: unfair select: case {i} chosen {c} times out of {trials} (counts {counts:?}, expected {expect:.0} +- {:.0})",
            7.0 * sigma
        );
    }
}

/// TestSelectFairness: with two always-ready cases (and two never-ready ones
/// listed first), each ready case is chosen about half the time.
#[test]
fn select_fairness() {
    let _w = common::watchdog();
    run(|| {
        let trials = scale(10_000);
        let (c1_tx, c1_rx) = chan::<u8>(trials + 1);
        let (c2_tx, c2_rx) = chan::<u8>(trials + 1);
        for _ in 0..trials + 1 {
            c1_tx.send(1).unwrap();
            c2_tx.send(2).unwrap();
        }
        let (_c3_tx, c3_rx) = chan::<u8>(0);
        let (_c4_tx, c4_rx) = chan::<u8>(0);
        let (out_tx, out_rx) = chan::<u8>(0);
        let (done_tx, done_rx) = chan::<u8>(0);
        let h = goro::spawn(move || loop {
            let b = goro::select! {
                recv(c3_rx) -> b => { b.unwrap() },
                recv(c4_rx) -> b => { b.unwrap() },
                recv(c1_rx) -> b => { b.unwrap() },
                recv(c2_rx) -> b => { b.unwrap() },
            };
            goro::select! {
                send(out_tx, b) -> r => { r.unwrap() },
                recv(done_rx) -> _d => { return; },
            }
        });
        let mut counts = [0usize; 2];
        for _ in 0..trials {
            match out_rx.recv().unwrap() {
                1 => counts[0] += 1,
                2 => counts[1] += 1,
                b => panic!("unexpected value {b} on channel"),
            }
        }
        done_tx.close();
        h.join().unwrap();
        assert_uniformish(&counts, "2 ready recv cases");
    });
}

/// Four ready cases of mixed kinds (two receives, two sends) are each chosen
/// about a quarter of the time.
#[test]
fn select_fairness_four_mixed_cases() {
    let _w = common::watchdog();
    run(|| {
        let trials = scale(8_000);
        let (a_tx, a_rx) = chan::<u8>(trials);
        let (b_tx, b_rx) = chan::<u8>(trials);
        let (c_tx, _c_rx) = chan::<u8>(trials);
        let (d_tx, _d_rx) = chan::<u8>(trials);
        for _ in 0..trials {
            a_tx.send(0).unwrap();
            b_tx.send(1).unwrap();
        }
        let mut counts = [0usize; 4];
        for _ in 0..trials {
            let i = goro::select! {
                recv(a_rx) -> v => { assert_eq!(v, Ok(0)); 0 },
                send(c_tx, 2) -> r => { r.unwrap(); 2 },
                recv(b_rx) -> v => { assert_eq!(v, Ok(1)); 1 },
                send(d_tx, 3) -> r => { r.unwrap(); 3 },
            };
            counts[i] += 1;
        }
        assert_uniformish(&counts, "4 ready mixed cases");
    });
}

/// TestSelectDuplicateChannel: a G can be queued on the same channel several
/// times; waking it through another channel must dequeue it from all of them
/// without corrupting the wait queue.
#[test]
fn select_duplicate_channel() {
    let _w = common::watchdog();
    run(|| {
        let (c_tx, c_rx) = chan::<i32>(0);
        let (d_tx, d_rx) = chan::<i32>(0);
        let (e_tx, e_rx) = chan::<i32>(0);

        // Goroutine A.
        let a = {
            let c_rx = c_rx.clone();
            goro::spawn(move || {
                let got = goro::select! {
                    recv(c_rx) -> v => { ("c1", v) },
                    recv(c_rx) -> v => { ("c2", v) },
                    recv(d_rx) -> v => { ("d", v) },
                };
                e_tx.send(9).unwrap();
                got
            })
        };
        let_others_run(); // make it likely that A is queued first on c

        // Goroutine B.
        let b = goro::spawn(move || c_rx.recv());
        let_others_run(); // make it likely that B is queued on c before continuing

        d_tx.send(7).unwrap(); // wakes A, which dequeues itself from c (twice)
        assert_eq!(e_rx.recv(), Ok(9)); // A tells us it's done
        c_tx.send(8).unwrap(); // wakes B; a corrupted c.recvq would try to wake A
        assert_eq!(a.join().unwrap(), ("d", Ok(7)));
        assert_eq!(b.join().unwrap(), Ok(8));
    });
}

/// One channel in two receive arms: exactly one arm fires per ready value,
/// exactly one value is consumed, and both arms get chosen.
#[test]
fn select_same_channel_twice_ready() {
    let _w = common::watchdog();
    run(|| {
        let trials = scale(4_000);
        let (tx, rx) = chan::<usize>(trials);
        for i in 0..trials {
            tx.send(i).unwrap();
        }
        let mut counts = [0usize; 2];
        for i in 0..trials {
            let (arm, v) = goro::select! {
                recv(rx) -> v => { (0, v) },
                recv(rx) -> v => { (1, v) },
            };
            assert_eq!(v, Ok(i), "each select consumes exactly one value, in order");
            counts[arm] += 1;
        }
        assert!(matches!(rx.try_recv(), Err(goro::TryRecvError::Empty)));
        assert_uniformish(&counts, "duplicate recv arms");
    });
}

/// TestSelfSelect: send and receive on the same channel in one select must not
/// crash or deadlock, and on an unbuffered channel a goroutine never receives
/// its own value.
#[test]
fn self_select() {
    let _w = common::watchdog();
    run(|| {
        for cap in [0usize, 10] {
            let (tx, rx) = chan::<usize>(cap);
            let hs: Vec<_> = (0..2usize)
                .map(|p| {
                    let (tx, rx) = (tx.clone(), rx.clone());
                    goro::spawn(move || {
                        for i in 0..scale(1000) {
                            if p == 0 || i % 2 == 0 {
                                goro::select! {
                                    send(tx, p) -> r => { r.unwrap() },
                                    recv(rx) -> v => {
                                        if cap == 0 && v == Ok(p) {
                                            panic!("self receive");
                                        }
                                    },
                                }
                            } else {
                                goro::select! {
                                    recv(rx) -> v => {
                                        if cap == 0 && v == Ok(p) {
                                            panic!("self receive");
                                        }
                                    },
                                    send(tx, p) -> r => { r.unwrap() },
                                }
                            }
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        }
    });
}

/// TestSelectStress: 4 channels (two unbuffered, two buffered); one sender and
/// one receiver per channel, plus one goroutine sending N values on each in a
/// single select and one receiving N values from each in a single select.
/// Must not deadlock, and every count must come out exact.
#[test]
fn select_stress() {
    let _w = common::watchdog();
    run(|| {
        let n = scale(100_000);
        let caps = [0usize, 0, 2, 3];
        let (txs, rxs): (Vec<_>, Vec<_>) = caps.iter().map(|&c| chan::<i32>(c)).unzip();
        let mut hs = Vec::new();
        for k in 0..4 {
            let tx = txs[k].clone();
            hs.push(goro::spawn(move || {
                for _ in 0..n {
                    tx.send(0).unwrap();
                }
            }));
            let rx = rxs[k].clone();
            hs.push(goro::spawn(move || {
                for _ in 0..n {
                    rx.recv().unwrap();
                }
            }));
        }
        // Select sender.
        {
            let mut c1: Vec<goro::Sender<i32>> = txs.clone();
            hs.push(goro::spawn(move || {
                // "nil" channel: nobody ever receives on it.
                let (never_tx, _never_rx) = chan::<i32>(0);
                let mut cnt = [0usize; 4];
                for _ in 0..4 * n {
                    let k = goro::select! {
                        send(c1[3], 0) -> r => { r.unwrap(); 3 },
                        send(c1[2], 0) -> r => { r.unwrap(); 2 },
                        send(c1[0], 0) -> r => { r.unwrap(); 0 },
                        send(c1[1], 0) -> r => { r.unwrap(); 1 },
                    };
                    cnt[k] += 1;
                    if cnt[k] == n {
                        c1[k] = never_tx.clone();
                    }
                }
                assert_eq!(cnt, [n; 4]);
            }));
        }
        // Select receiver.
        {
            let mut c1: Vec<goro::Receiver<i32>> = rxs.clone();
            hs.push(goro::spawn(move || {
                // "nil" channel: nobody ever sends on it.
                let (_never_tx, never_rx) = chan::<i32>(0);
                let mut cnt = [0usize; 4];
                for _ in 0..4 * n {
                    let k = goro::select! {
                        recv(c1[0]) -> v => { v.unwrap(); 0 },
                        recv(c1[1]) -> v => { v.unwrap(); 1 },
                        recv(c1[2]) -> v => { v.unwrap(); 2 },
                        recv(c1[3]) -> v => { v.unwrap(); 3 },
                    };
                    cnt[k] += 1;
                    if cnt[k] == n {
                        c1[k] = never_rx.clone();
                    }
                }
                assert_eq!(cnt, [n; 4]);
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        for rx in &rxs {
            assert!(matches!(rx.try_recv(), Err(goro::TryRecvError::Empty)));
        }
    });
}

/// TestChanSendInterface: sends of trait objects through select, with
/// default, on a full channel; unselected send values must not leak.
#[test]
fn chan_send_interface() {
    let _w = common::watchdog();
    struct Mt;
    run(|| {
        type Any = Arc<dyn std::any::Any + Send + Sync>;
        let m: Arc<Mt> = Arc::new(Mt);
        let (tx, rx) = chan::<Any>(1);
        assert!(tx.send(m.clone()).is_ok());
        goro::select! {
            send(tx, m.clone() as Any) -> _r => { panic!("send to full chan") },
            default => {},
        }
        goro::select! {
            send(tx, m.clone() as Any) -> _r => { panic!("send to full chan") },
            send(tx, Arc::new(Mt) as Any) -> _r => { panic!("send to full chan") },
            default => {},
        }
        // Only the buffered value and `m` itself hold references: values of
        // send arms that were not chosen were dropped (or never built).
        assert_eq!(Arc::strong_count(&m), 2);
        let got = rx.recv().unwrap();
        assert!(got.downcast_ref::<Mt>().is_some());
        drop(got);
        assert_eq!(Arc::strong_count(&m), 1);
    });
}

/// Values of send arms that were not chosen are dropped, never leaked, also
/// when another arm completes after blocking.
#[test]
fn select_unchosen_send_values_not_leaked() {
    let _w = common::watchdog();
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    struct Tracked;
    impl Tracked {
        fn new() -> Tracked {
            LIVE.fetch_add(1, SeqCst);
            Tracked
        }
    }
    impl Drop for Tracked {
        fn drop(&mut self) {
            LIVE.fetch_sub(1, SeqCst);
        }
    }
    run(|| {
        let (a_tx, a_rx) = chan::<Tracked>(0);
        let (b_tx, _b_rx) = chan::<Tracked>(0);
        let (c_tx, c_rx) = chan::<i32>(0);
        let h = goro::spawn(move || {
            for _ in 0..100 {
                goro::select! {
                    send(a_tx, Tracked::new()) -> r => { assert!(r.is_ok()) },
                    send(b_tx, Tracked::new()) -> _r => { panic!("nobody receives on b") },
                    recv(c_rx) -> _v => { panic!("nobody sends on c") },
                }
            }
        });
        for _ in 0..100 {
            drop(a_rx.recv().unwrap());
        }
        h.join().unwrap();
        drop(c_tx);
        assert_eq!(LIVE.load(SeqCst), 0, "send-arm values leaked");
    });
}

/// TestPseudoRandomSend: a select with two send cases on the same channel
/// picks pseudo-randomly, both when it finds a waiting receiver and when it
/// blocks (random enqueue order, unbuffered case).
#[test]
fn pseudo_random_send() {
    let _w = common::watchdog();
    run(|| {
        let n = 100;
        for cap in [0usize, n] {
            let (tx, rx) = chan::<usize>(cap);
            let h = goro::spawn(move || {
                let mut l = Vec::with_capacity(n);
                for _ in 0..n {
                    goro::yield_now();
                    l.push(rx.recv().unwrap());
                }
                l
            });
            for _ in 0..n {
                goro::select! {
                    send(tx, 1) -> r => { r.unwrap() },
                    send(tx, 0) -> r => { r.unwrap() },
                }
            }
            let l = h.join().unwrap();
            let n1: usize = l.iter().sum();
            let n0 = n - n1;
            assert!(
                n0 > n / 10 && n1 > n / 10,
                "want pseudorandom, got {n0} zeros and {n1} ones (chan cap {cap})"
            );
        }
    });
}

/// `default` runs only when no case is ready; a ready case always wins over
/// default.
#[test]
fn select_default() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(1);
        let (full_tx, _full_rx) = chan::<i32>(0);
        for _ in 0..100 {
            let r = goro::select! {
                recv(rx) -> _v => { "recv" },
                send(full_tx, 1) -> _r => { "send" },
                default => { "default" },
            };
            assert_eq!(r, "default");
        }
        for i in 0..100 {
            tx.send(i).unwrap();
            let r = goro::select! {
                recv(rx) -> v => { assert_eq!(v, Ok(i)); "recv" },
                send(full_tx, 1) -> _r => { "send" },
                default => { "default" },
            };
            assert_eq!(r, "recv");
        }
        // A send arm with room in the buffer is ready too.
        let r = goro::select! {
            send(tx, 5) -> res => { res.unwrap(); "send" },
            default => { "default" },
        };
        assert_eq!(r, "send");
        assert_eq!(rx.recv(), Ok(5));
    });
}

/// A one-case select is the channel operation itself (Go's compiler emits
/// chansend1/chanrecv1, or selectnbsend/selectnbrecv with a default; goro's
/// selectgo does the same at run time): every outcome of both directions,
/// with and without a default, from a goroutine and from a plain thread,
/// and the value of a failed send handed back.
#[test]
fn one_case_select_is_the_channel_operation() {
    let _w = common::watchdog();
    fn check() {
        // Non-blocking send: room, full, closed.
        let (tx, rx) = chan::<String>(1);
        let r = goro::select! { send(tx, "a".to_string()) -> r => r.is_ok(), default => false };
        assert!(r, "send with room took default");
        let r = goro::select! { send(tx, "b".to_string()) -> _r => "sent", default => "default" };
        assert_eq!(r, "default", "send on a full channel");
        // Non-blocking receive: ready, empty.
        let r = goro::select! { recv(rx) -> v => v, default => Err(RecvError) };
        assert_eq!(r.as_deref(), Ok("a"));
        let r = goro::select! { recv(rx) -> _v => "recv", default => "default" };
        assert_eq!(r, "default", "receive on an empty channel");
        tx.close();
        let r = goro::select! { send(tx, "c".to_string()) -> r => r, default => Ok(()) };
        assert_eq!(
            r,
            Err(SendError("c".to_string())),
            "send on closed: value back"
        );
        let r = goro::select! { recv(rx) -> v => v, default => Ok(String::new()) };
        assert_eq!(r, Err(RecvError), "receive on closed and drained");
        // Blocking, no default: completes once a peer acts.
        let (tx, rx) = chan::<u64>(0);
        let (tx2, rx2) = chan::<u64>(0);
        let peer = std::thread::spawn(move || {
            assert_eq!(rx.recv(), Ok(7));
            tx2.send(8).unwrap();
        });
        let r = goro::select! { send(tx, 7) -> r => r };
        assert_eq!(r, Ok(()));
        let v = goro::select! { recv(rx2) -> v => v };
        assert_eq!(v, Ok(8));
        peer.join().unwrap();
        // Blocking, woken by close.
        let (tx, rx) = chan::<u64>(0);
        let closer = std::thread::spawn(move || {
            // Not an ordering: either way the receive ends in Err. The
            // pause only makes the parked case the likely one.
            std::thread::sleep(Duration::from_millis(5));
            tx.close();
        });
        let v = goro::select! { recv(rx) -> v => v };
        assert_eq!(v, Err(RecvError));
        closer.join().unwrap();
    }
    run(check);
    check();
}

/// `select!` is an expression; arms may be plain expressions or blocks, may
/// `break` out of an enclosing loop, `return` from the enclosing function and
/// use `?`.
#[test]
fn select_expression_break_return() {
    let _w = common::watchdog();
    fn first_big(rx: &goro::Receiver<i32>) -> Option<i32> {
        loop {
            goro::select! {
                recv(rx) -> v => {
                    let v = v.ok()?;
                    if v > 10 {
                        return Some(v);
                    }
                },
            }
        }
    }
    run(|| {
        let (tx, rx) = chan::<i32>(32);
        for v in [1, 5, 11, 3] {
            tx.send(v).unwrap();
        }
        assert_eq!(first_big(&rx), Some(11));
        tx.close();
        // 3 is still buffered, then the channel reports closed: `?` returns None.
        assert_eq!(first_big(&rx), None);

        // Expression arms without braces.
        let (tx, rx) = chan::<i32>(1);
        tx.send(4).unwrap();
        let doubled = goro::select! {
            recv(rx) -> v => v.unwrap() * 2,
            default => -1,
        };
        assert_eq!(doubled, 8);

        // break out of a loop from inside an arm.
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || {
            for i in 1..=10 {
                tx.send(i).unwrap();
            }
        });
        let mut sum = 0;
        loop {
            goro::select! {
                recv(rx) -> v => {
                    match v {
                        Ok(x) => sum += x,
                        Err(RecvError) => break,
                    }
                },
            }
        }
        assert_eq!(sum, 55);
        h.join().unwrap();
    });
}

/// A select on closed channels: receive arms are ready with `Err`, send arms
/// are ready with `Err(SendError(v))` carrying the value.
#[test]
fn select_on_closed_channels() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<String>(0);
        tx.close();
        let r = goro::select! {
            send(tx, String::from("hello")) -> r => { r },
        };
        match r {
            Err(SendError(s)) => assert_eq!(s, "hello"),
            Ok(()) => panic!("send on closed channel succeeded"),
        }
        let v = goro::select! {
            recv(rx) -> v => { v },
        };
        assert_eq!(v, Err(RecvError));
        // With default: a closed channel is ready, default is not taken.
        let took_default = goro::select! {
            recv(rx) -> _v => { false },
            default => { true },
        };
        assert!(!took_default);
    });
}

/// A select blocked in a send arm returns `Err(SendError(v))` when the channel
/// is closed, and when its last Receiver is dropped.
#[test]
fn select_blocked_send_woken_by_close_and_receiver_drop() {
    let _w = common::watchdog();
    run(|| {
        for by_close in [true, false] {
            let (tx, rx) = chan::<i32>(0);
            let (_never_tx, never_rx) = chan::<i32>(0);
            let tx2 = tx.clone();
            let h = goro::spawn(move || {
                goro::select! {
                    send(tx, 42) -> r => { r },
                    recv(never_rx) -> _v => { unreachable!() },
                }
            });
            // The select really parked: close/drop wakes it.
            common::wait_parked(h.id());
            if by_close {
                tx2.close();
            } else {
                drop(rx);
            }
            match h.join().unwrap() {
                Err(SendError(v)) => assert_eq!(v, 42),
                Ok(()) => panic!("send completed without a receiver (by_close={by_close})"),
            }
        }
    });
}

/// A select blocked in receive arms wakes with `Err` when one channel closes.
#[test]
fn select_blocked_recv_woken_by_close() {
    let _w = common::watchdog();
    run(|| {
        let (a_tx, a_rx) = chan::<i32>(0);
        let (_b_tx, b_rx) = chan::<i32>(0);
        let h = goro::spawn(move || {
            goro::select! {
                recv(b_rx) -> v => { ("b", v) },
                recv(a_rx) -> v => { ("a", v) },
            }
        });
        // The select really parked: the close wakes it.
        common::wait_parked(h.id());
        drop(a_tx); // last sender: closes a
        assert_eq!(h.join().unwrap(), ("a", Err(RecvError)));
    });
}

/// The timeout idiom `recv(goro::time::after(d))`: fires no earlier than d
/// when nothing else is ready, and loses to a value that arrives.
#[test]
fn select_after_timeout_idiom() {
    let _w = common::watchdog();
    run(|| {
        let (_tx, rx) = chan::<i32>(0);
        let d = Duration::from_millis(50);
        let start = Instant::now();
        let fired = goro::select! {
            recv(rx) -> _v => { panic!("nothing was sent") },
            recv(goro::time::after(d)) -> t => { t.unwrap() },
        };
        assert!(
            start.elapsed() >= d,
            "after({d:?}) fired after {:?}",
            start.elapsed()
        );
        assert!(
            fired >= start + d,
            "after() sent an Instant before its deadline"
        );

        // A value that is sent wins over a long timeout.
        let (tx, rx) = chan::<i32>(0);
        let h = goro::spawn(move || tx.send(3).unwrap());
        let got = goro::select! {
            recv(rx) -> v => { v.unwrap() },
            recv(goro::time::after(Duration::from_secs(30))) -> _t => { panic!("timed out") },
        };
        assert_eq!(got, 3);
        h.join().unwrap();

        // In a loop, a fresh timer each time.
        let (tx, rx) = chan::<i32>(0);
        let mut timeouts = 0;
        for _ in 0..3 {
            goro::select! {
                recv(rx) -> _v => { panic!("nothing was sent") },
                recv(goro::time::after(Duration::from_millis(5))) -> _t => { timeouts += 1 },
            }
        }
        assert_eq!(timeouts, 3);
        drop(tx);
    });
}

/// Many goroutines selecting on the same set of channels from both sides:
/// every value is delivered exactly once.
#[test]
fn select_mpmc_exactly_once() {
    let _w = common::watchdog();
    run(|| {
        let per = scale(2_000);
        let (a_tx, a_rx) = chan::<usize>(0);
        let (b_tx, b_rx) = chan::<usize>(3);
        let producers: Vec<_> = (0..4usize)
            .map(|p| {
                let (a_tx, b_tx) = (a_tx.clone(), b_tx.clone());
                goro::spawn(move || {
                    for i in 0..per {
                        let v = p * per + i;
                        goro::select! {
                            send(a_tx, v) -> r => { r.unwrap() },
                            send(b_tx, v) -> r => { r.unwrap() },
                        }
                    }
                })
            })
            .collect();
        drop((a_tx, b_tx));
        let consumers: Vec<_> = (0..4)
            .map(|_| {
                let (a_rx, b_rx) = (a_rx.clone(), b_rx.clone());
                goro::spawn(move || {
                    let mut got = Vec::new();
                    let (mut a_open, mut b_open) = (true, true);
                    let (_never_tx, never_rx) = chan::<usize>(0);
                    while a_open || b_open {
                        let a = if a_open { a_rx.clone() } else { never_rx.clone() };
                        let b = if b_open { b_rx.clone() } else { never_rx.clone() };
                        goro::select! {
                            recv(a) -> v => { match v { Ok(v) => got.push(v), Err(_) => a_open = false } },
                            recv(b) -> v => { match v { Ok(v) => got.push(v), Err(_) => b_open = false } },
                        }
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let mut all: Vec<usize> = consumers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..4 * per).collect::<Vec<_>>());
    });
}

/// select! works on a plain OS thread (blocking the thread) against
/// goroutines on the other side.
#[test]
fn select_on_plain_thread() {
    let _w = common::watchdog();
    let (a_tx, a_rx) = chan::<i32>(0);
    let (b_tx, b_rx) = chan::<i32>(0);
    let h = goro::spawn(move || {
        for i in 0..100 {
            if i % 2 == 0 {
                a_tx.send(i).unwrap();
            } else {
                b_tx.send(i).unwrap();
            }
        }
    });
    let t = std::thread::spawn(move || {
        let mut sum = 0;
        let (mut a_open, mut b_open) = (true, true);
        let (_never_tx, never_rx) = chan::<i32>(0);
        while a_open || b_open {
            let a = if a_open {
                a_rx.clone()
            } else {
                never_rx.clone()
            };
            let b = if b_open {
                b_rx.clone()
            } else {
                never_rx.clone()
            };
            goro::select! {
                recv(a) -> v => { match v { Ok(v) => sum += v, Err(_) => a_open = false } },
                recv(b) -> v => { match v { Ok(v) => sum += v, Err(_) => b_open = false } },
            }
        }
        sum
    });
    assert_eq!(t.join().unwrap(), (0..100).sum::<i32>());
    h.join().unwrap();
}

// ---------------------------------------------------------------------------
// crossbeam-channel syntax, default(timeout), never(), many cases.

/// Arms whose body is a block need no comma before the next arm (as in
/// crossbeam-channel); commas after blocks and after the last arm are
/// still accepted, and expression arms keep theirs.
#[test]
fn select_commaless_block_arms() {
    let _w = common::watchdog();
    run(|| {
        let (tx1, rx1) = chan::<i32>(1);
        let (tx2, rx2) = chan::<&'static str>(1);
        let (tx3, _rx3) = chan::<u8>(0);
        tx2.send("b").unwrap();
        let got = goro::select! {
            recv(rx1) -> v => { format!("a{}", v.unwrap()) }
            recv(rx2) -> w => { w.unwrap().to_string() }
            send(tx3, 1) -> _r => { "sent".to_string() }
        };
        assert_eq!(got, "b");
        tx1.send(7).unwrap();
        let got = goro::select! {
            recv(rx1) -> v => { v.unwrap() }
            recv(rx2) -> _w => { -1 },
            default => { -2 }
        };
        assert_eq!(got, 7);
        let got = goro::select! {
            recv(rx1) -> v => v.unwrap(),
            recv(rx2) -> _w => { -1 }
            default => -2,
        };
        assert_eq!(got, -2);
        // A block arm as the last arm, then a default(timeout) block.
        let got = goro::select! {
            recv(rx1) -> _v => { 1 }
            default(Duration::from_millis(1)) => { 2 }
        };
        assert_eq!(got, 2);
        drop(tx1);
        drop(tx2);
    });
}

/// A select with no cases and `default(timeout)` (Go's `select {}` with a
/// deadline) waits out the timeout, on a goroutine and on a plain thread.
#[test]
fn select_no_cases_default_timeout_waits() {
    let _w = common::watchdog();
    let check = || {
        let d = Duration::from_millis(20);
        let start = Instant::now();
        let r = goro::select! {
            default(d) => { "timeout" }
        };
        assert_eq!(r, "timeout");
        assert!(start.elapsed() >= d, "select with no cases returned early");
    };
    run(check);
    check();
}

/// default(timeout): runs if no case is ready within the timeout (no
/// earlier), and a case that becomes ready in time wins.
#[test]
fn select_default_timeout_both_ways() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<i32>(0);
        let d = Duration::from_millis(30);
        let start = Instant::now();
        let r = goro::select! {
            recv(rx) -> _v => { panic!("nothing was sent") }
            default(d) => { "timeout" }
        };
        assert_eq!(r, "timeout");
        assert!(start.elapsed() >= d, "default(timeout) ran early");

        // A sender arrives while the select is parked: the case wins.
        let (ready_tx, ready_rx) = chan::<()>(0);
        let h = goro::spawn(move || {
            ready_rx.recv().unwrap();
            tx.send(5).unwrap();
            tx
        });
        let r = goro::select! {
            recv(rx) -> v => { v.unwrap() }
            send(ready_tx, ()) -> _s => { -1 }
            default(Duration::from_secs(60)) => { -2 }
        };
        assert_eq!(r, -1, "the send to the helper is the only ready case");
        let r = goro::select! {
            recv(rx) -> v => { v.unwrap() }
            default(Duration::from_secs(60)) => { -2 }
        };
        assert_eq!(r, 5);
        let tx = h.join().unwrap();

        // Ready at once: the case wins even with a zero timeout.
        let (btx, brx) = chan::<i32>(1);
        btx.send(9).unwrap();
        let r = goro::select! {
            recv(brx) -> v => { v.unwrap() }
            default(Duration::ZERO) => { -2 }
        };
        assert_eq!(r, 9);
        // Duration::MAX means no timeout.
        let h = goro::spawn(move || tx.send(6).unwrap());
        let r = goro::select! {
            recv(rx) -> v => { v.unwrap() }
            default(Duration::MAX) => { -2 }
        };
        assert_eq!(r, 6);
        h.join().unwrap();
    });
}

/// A select with default(timeout) whose case wins leaves no live timer: the
/// timer heaps do not grow with the number of such selects (a parked one's
/// timeout entry goes stale and is purged).
#[test]
fn select_default_timeout_leaves_no_timers() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<usize>(1);
        for i in 0..scale(20_000) {
            tx.send(i).unwrap();
            let v = goro::select! {
                recv(rx) -> v => { v.unwrap() }
                default(Duration::from_secs(3600)) => { usize::MAX }
            };
            assert_eq!(v, i);
        }
        let (utx, urx) = chan::<usize>(0);
        let h = goro::spawn(move || {
            for i in 0..scale(5_000) {
                utx.send(i).unwrap();
            }
        });
        for i in 0..scale(5_000) {
            let v = goro::select! {
                recv(urx) -> v => { v.unwrap() }
                default(Duration::from_secs(3600)) => { usize::MAX }
            };
            assert_eq!(v, i);
        }
        h.join().unwrap();
        let pending = goro::__private::timers_pending();
        assert!(pending < 20_000, "{pending} timers pending");
    });
}

/// never() is a case that is never ready (a disabled case): it never wins
/// against a ready case, select falls to default or times out, and it is
/// not closed.
#[test]
fn select_never_is_disabled_case() {
    let _w = common::watchdog();
    run(|| {
        let nv = goro::never::<i32>();
        assert!(!nv.is_closed());
        assert!(matches!(nv.try_recv(), Err(goro::TryRecvError::Empty)));
        let (tx, rx) = chan::<i32>(1);
        for i in 0..200 {
            tx.send(i).unwrap();
            let v = goro::select! {
                recv(nv) -> _v => { panic!("never() was ready") }
                recv(rx) -> v => { v.unwrap() }
            };
            assert_eq!(v, i);
        }
        let r = goro::select! {
            recv(nv) -> _v => { 1 }
            default => { 2 }
        };
        assert_eq!(r, 2);
        let r = goro::select! {
            recv(goro::never::<String>()) -> _v => { 1 }
            default(Duration::from_millis(5)) => { 2 }
        };
        assert_eq!(r, 2);
        assert!(matches!(
            nv.recv_timeout(Duration::from_millis(5)),
            Err(goro::RecvTimeoutError::Timeout)
        ));
    });
}

/// A select! over 9 receive cases (generated arms).
fn select9(rxs: &[goro::Receiver<u64>]) -> (usize, Result<u64, RecvError>) {
    assert_eq!(rxs.len(), 9);
    goro::select! {
        recv(rxs[0]) -> v => (0usize, v),
        recv(rxs[1]) -> v => (1usize, v),
        recv(rxs[2]) -> v => (2usize, v),
        recv(rxs[3]) -> v => (3usize, v),
        recv(rxs[4]) -> v => (4usize, v),
        recv(rxs[5]) -> v => (5usize, v),
        recv(rxs[6]) -> v => (6usize, v),
        recv(rxs[7]) -> v => (7usize, v),
        recv(rxs[8]) -> v => (8usize, v),
    }
}

/// A select! over 17 receive cases (generated arms).
fn select17(rxs: &[goro::Receiver<u64>]) -> (usize, Result<u64, RecvError>) {
    assert_eq!(rxs.len(), 17);
    goro::select! {
        recv(rxs[0]) -> v => (0usize, v),
        recv(rxs[1]) -> v => (1usize, v),
        recv(rxs[2]) -> v => (2usize, v),
        recv(rxs[3]) -> v => (3usize, v),
        recv(rxs[4]) -> v => (4usize, v),
        recv(rxs[5]) -> v => (5usize, v),
        recv(rxs[6]) -> v => (6usize, v),
        recv(rxs[7]) -> v => (7usize, v),
        recv(rxs[8]) -> v => (8usize, v),
        recv(rxs[9]) -> v => (9usize, v),
        recv(rxs[10]) -> v => (10usize, v),
        recv(rxs[11]) -> v => (11usize, v),
        recv(rxs[12]) -> v => (12usize, v),
        recv(rxs[13]) -> v => (13usize, v),
        recv(rxs[14]) -> v => (14usize, v),
        recv(rxs[15]) -> v => (15usize, v),
        recv(rxs[16]) -> v => (16usize, v),
    }
}

/// A select! over 64 receive cases (generated arms).
fn select64(rxs: &[goro::Receiver<u64>]) -> (usize, Result<u64, RecvError>) {
    assert_eq!(rxs.len(), 64);
    goro::select! {
        recv(rxs[0]) -> v => (0usize, v),
        recv(rxs[1]) -> v => (1usize, v),
        recv(rxs[2]) -> v => (2usize, v),
        recv(rxs[3]) -> v => (3usize, v),
        recv(rxs[4]) -> v => (4usize, v),
        recv(rxs[5]) -> v => (5usize, v),
        recv(rxs[6]) -> v => (6usize, v),
        recv(rxs[7]) -> v => (7usize, v),
        recv(rxs[8]) -> v => (8usize, v),
        recv(rxs[9]) -> v => (9usize, v),
        recv(rxs[10]) -> v => (10usize, v),
        recv(rxs[11]) -> v => (11usize, v),
        recv(rxs[12]) -> v => (12usize, v),
        recv(rxs[13]) -> v => (13usize, v),
        recv(rxs[14]) -> v => (14usize, v),
        recv(rxs[15]) -> v => (15usize, v),
        recv(rxs[16]) -> v => (16usize, v),
        recv(rxs[17]) -> v => (17usize, v),
        recv(rxs[18]) -> v => (18usize, v),
        recv(rxs[19]) -> v => (19usize, v),
        recv(rxs[20]) -> v => (20usize, v),
        recv(rxs[21]) -> v => (21usize, v),
        recv(rxs[22]) -> v => (22usize, v),
        recv(rxs[23]) -> v => (23usize, v),
        recv(rxs[24]) -> v => (24usize, v),
        recv(rxs[25]) -> v => (25usize, v),
        recv(rxs[26]) -> v => (26usize, v),
        recv(rxs[27]) -> v => (27usize, v),
        recv(rxs[28]) -> v => (28usize, v),
        recv(rxs[29]) -> v => (29usize, v),
        recv(rxs[30]) -> v => (30usize, v),
        recv(rxs[31]) -> v => (31usize, v),
        recv(rxs[32]) -> v => (32usize, v),
        recv(rxs[33]) -> v => (33usize, v),
        recv(rxs[34]) -> v => (34usize, v),
        recv(rxs[35]) -> v => (35usize, v),
        recv(rxs[36]) -> v => (36usize, v),
        recv(rxs[37]) -> v => (37usize, v),
        recv(rxs[38]) -> v => (38usize, v),
        recv(rxs[39]) -> v => (39usize, v),
        recv(rxs[40]) -> v => (40usize, v),
        recv(rxs[41]) -> v => (41usize, v),
        recv(rxs[42]) -> v => (42usize, v),
        recv(rxs[43]) -> v => (43usize, v),
        recv(rxs[44]) -> v => (44usize, v),
        recv(rxs[45]) -> v => (45usize, v),
        recv(rxs[46]) -> v => (46usize, v),
        recv(rxs[47]) -> v => (47usize, v),
        recv(rxs[48]) -> v => (48usize, v),
        recv(rxs[49]) -> v => (49usize, v),
        recv(rxs[50]) -> v => (50usize, v),
        recv(rxs[51]) -> v => (51usize, v),
        recv(rxs[52]) -> v => (52usize, v),
        recv(rxs[53]) -> v => (53usize, v),
        recv(rxs[54]) -> v => (54usize, v),
        recv(rxs[55]) -> v => (55usize, v),
        recv(rxs[56]) -> v => (56usize, v),
        recv(rxs[57]) -> v => (57usize, v),
        recv(rxs[58]) -> v => (58usize, v),
        recv(rxs[59]) -> v => (59usize, v),
        recv(rxs[60]) -> v => (60usize, v),
        recv(rxs[61]) -> v => (61usize, v),
        recv(rxs[62]) -> v => (62usize, v),
        recv(rxs[63]) -> v => (63usize, v),
    }
}

/// One of the generated many-case selects.
type Select = fn(&[goro::Receiver<u64>]) -> (usize, Result<u64, RecvError>);

/// Selects over 9, 17 and 64 cases (past the on-stack sudog array and the
/// on-stack order buffers): a send on any one channel wakes the parked
/// select with that case, and so does a close (Err) of any one while it is
/// parked; the other cases are dequeued (later sends are not lost to them).
#[test]
fn select_many_cases_parked() {
    let _w = common::watchdog();
    run(|| {
        let sel: [(usize, Select); 3] = [(9, select9), (17, select17), (64, select64)];
        for &(n, f) in &sel {
            for round in 0..scale(40) {
                let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| chan::<u64>(0)).unzip();
                let k = (round * 7 + 3) % n;
                let close = round % 2 == 1;
                let (go_tx, go_rx) = chan::<()>(0);
                let txs2 = txs.clone();
                let h = goro::spawn(move || {
                    go_rx.recv().unwrap();
                    // Give the select time to park (correct either way).
                    let_others_run();
                    if close {
                        txs2[k].close();
                    } else {
                        txs2[k].send(100 + k as u64).unwrap();
                    }
                });
                go_tx.send(()).unwrap();
                let (i, v) = f(&rxs);
                assert_eq!(i, k, "{n} cases: woke on case {i}, expected {k}");
                if close {
                    assert_eq!(v, Err(RecvError), "{n} cases: closed case");
                } else {
                    assert_eq!(v, Ok(100 + k as u64));
                }
                h.join().unwrap();
                // Every other channel's queue is clean: a plain send with a
                // receiver waiting goes through to that receiver.
                let j = (k + 1) % n;
                let rx = rxs[j].clone();
                let h = goro::spawn(move || rx.recv().unwrap());
                txs[j].send(7).unwrap();
                assert_eq!(h.join().unwrap(), 7);
            }
        }
    });
}

/// 120 block arms without commas compile with the default recursion limit
/// (the limit docs/SELECT.md states), and one of them is chosen.
#[test]
fn select_120_commaless_arms() {
    let _w = common::watchdog();
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..120).map(|_| chan::<u64>(1)).unzip();
    txs[119].send(5).unwrap();
    let (i, v) = goro::select! {
        recv(rxs[0]) -> v => { (0usize, v) }
        recv(rxs[1]) -> v => { (1usize, v) }
        recv(rxs[2]) -> v => { (2usize, v) }
        recv(rxs[3]) -> v => { (3usize, v) }
        recv(rxs[4]) -> v => { (4usize, v) }
        recv(rxs[5]) -> v => { (5usize, v) }
        recv(rxs[6]) -> v => { (6usize, v) }
        recv(rxs[7]) -> v => { (7usize, v) }
        recv(rxs[8]) -> v => { (8usize, v) }
        recv(rxs[9]) -> v => { (9usize, v) }
        recv(rxs[10]) -> v => { (10usize, v) }
        recv(rxs[11]) -> v => { (11usize, v) }
        recv(rxs[12]) -> v => { (12usize, v) }
        recv(rxs[13]) -> v => { (13usize, v) }
        recv(rxs[14]) -> v => { (14usize, v) }
        recv(rxs[15]) -> v => { (15usize, v) }
        recv(rxs[16]) -> v => { (16usize, v) }
        recv(rxs[17]) -> v => { (17usize, v) }
        recv(rxs[18]) -> v => { (18usize, v) }
        recv(rxs[19]) -> v => { (19usize, v) }
        recv(rxs[20]) -> v => { (20usize, v) }
        recv(rxs[21]) -> v => { (21usize, v) }
        recv(rxs[22]) -> v => { (22usize, v) }
        recv(rxs[23]) -> v => { (23usize, v) }
        recv(rxs[24]) -> v => { (24usize, v) }
        recv(rxs[25]) -> v => { (25usize, v) }
        recv(rxs[26]) -> v => { (26usize, v) }
        recv(rxs[27]) -> v => { (27usize, v) }
        recv(rxs[28]) -> v => { (28usize, v) }
        recv(rxs[29]) -> v => { (29usize, v) }
        recv(rxs[30]) -> v => { (30usize, v) }
        recv(rxs[31]) -> v => { (31usize, v) }
        recv(rxs[32]) -> v => { (32usize, v) }
        recv(rxs[33]) -> v => { (33usize, v) }
        recv(rxs[34]) -> v => { (34usize, v) }
        recv(rxs[35]) -> v => { (35usize, v) }
        recv(rxs[36]) -> v => { (36usize, v) }
        recv(rxs[37]) -> v => { (37usize, v) }
        recv(rxs[38]) -> v => { (38usize, v) }
        recv(rxs[39]) -> v => { (39usize, v) }
        recv(rxs[40]) -> v => { (40usize, v) }
        recv(rxs[41]) -> v => { (41usize, v) }
        recv(rxs[42]) -> v => { (42usize, v) }
        recv(rxs[43]) -> v => { (43usize, v) }
        recv(rxs[44]) -> v => { (44usize, v) }
        recv(rxs[45]) -> v => { (45usize, v) }
        recv(rxs[46]) -> v => { (46usize, v) }
        recv(rxs[47]) -> v => { (47usize, v) }
        recv(rxs[48]) -> v => { (48usize, v) }
        recv(rxs[49]) -> v => { (49usize, v) }
        recv(rxs[50]) -> v => { (50usize, v) }
        recv(rxs[51]) -> v => { (51usize, v) }
        recv(rxs[52]) -> v => { (52usize, v) }
        recv(rxs[53]) -> v => { (53usize, v) }
        recv(rxs[54]) -> v => { (54usize, v) }
        recv(rxs[55]) -> v => { (55usize, v) }
        recv(rxs[56]) -> v => { (56usize, v) }
        recv(rxs[57]) -> v => { (57usize, v) }
        recv(rxs[58]) -> v => { (58usize, v) }
        recv(rxs[59]) -> v => { (59usize, v) }
        recv(rxs[60]) -> v => { (60usize, v) }
        recv(rxs[61]) -> v => { (61usize, v) }
        recv(rxs[62]) -> v => { (62usize, v) }
        recv(rxs[63]) -> v => { (63usize, v) }
        recv(rxs[64]) -> v => { (64usize, v) }
        recv(rxs[65]) -> v => { (65usize, v) }
        recv(rxs[66]) -> v => { (66usize, v) }
        recv(rxs[67]) -> v => { (67usize, v) }
        recv(rxs[68]) -> v => { (68usize, v) }
        recv(rxs[69]) -> v => { (69usize, v) }
        recv(rxs[70]) -> v => { (70usize, v) }
        recv(rxs[71]) -> v => { (71usize, v) }
        recv(rxs[72]) -> v => { (72usize, v) }
        recv(rxs[73]) -> v => { (73usize, v) }
        recv(rxs[74]) -> v => { (74usize, v) }
        recv(rxs[75]) -> v => { (75usize, v) }
        recv(rxs[76]) -> v => { (76usize, v) }
        recv(rxs[77]) -> v => { (77usize, v) }
        recv(rxs[78]) -> v => { (78usize, v) }
        recv(rxs[79]) -> v => { (79usize, v) }
        recv(rxs[80]) -> v => { (80usize, v) }
        recv(rxs[81]) -> v => { (81usize, v) }
        recv(rxs[82]) -> v => { (82usize, v) }
        recv(rxs[83]) -> v => { (83usize, v) }
        recv(rxs[84]) -> v => { (84usize, v) }
        recv(rxs[85]) -> v => { (85usize, v) }
        recv(rxs[86]) -> v => { (86usize, v) }
        recv(rxs[87]) -> v => { (87usize, v) }
        recv(rxs[88]) -> v => { (88usize, v) }
        recv(rxs[89]) -> v => { (89usize, v) }
        recv(rxs[90]) -> v => { (90usize, v) }
        recv(rxs[91]) -> v => { (91usize, v) }
        recv(rxs[92]) -> v => { (92usize, v) }
        recv(rxs[93]) -> v => { (93usize, v) }
        recv(rxs[94]) -> v => { (94usize, v) }
        recv(rxs[95]) -> v => { (95usize, v) }
        recv(rxs[96]) -> v => { (96usize, v) }
        recv(rxs[97]) -> v => { (97usize, v) }
        recv(rxs[98]) -> v => { (98usize, v) }
        recv(rxs[99]) -> v => { (99usize, v) }
        recv(rxs[100]) -> v => { (100usize, v) }
        recv(rxs[101]) -> v => { (101usize, v) }
        recv(rxs[102]) -> v => { (102usize, v) }
        recv(rxs[103]) -> v => { (103usize, v) }
        recv(rxs[104]) -> v => { (104usize, v) }
        recv(rxs[105]) -> v => { (105usize, v) }
        recv(rxs[106]) -> v => { (106usize, v) }
        recv(rxs[107]) -> v => { (107usize, v) }
        recv(rxs[108]) -> v => { (108usize, v) }
        recv(rxs[109]) -> v => { (109usize, v) }
        recv(rxs[110]) -> v => { (110usize, v) }
        recv(rxs[111]) -> v => { (111usize, v) }
        recv(rxs[112]) -> v => { (112usize, v) }
        recv(rxs[113]) -> v => { (113usize, v) }
        recv(rxs[114]) -> v => { (114usize, v) }
        recv(rxs[115]) -> v => { (115usize, v) }
        recv(rxs[116]) -> v => { (116usize, v) }
        recv(rxs[117]) -> v => { (117usize, v) }
        recv(rxs[118]) -> v => { (118usize, v) }
        recv(rxs[119]) -> v => { (119usize, v) }
    };
    assert_eq!((i, v), (119, Ok(5)));
}

/// Runs `f` on a new goroutine or a new OS thread; the returned closure
/// joins it and re-raises its panic on the caller.
fn start_on<T: Send + 'static>(
    thread: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Box<dyn FnOnce() -> T + Send> {
    if thread {
        let h = std::thread::spawn(f);
        Box::new(move || h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    } else {
        let h = goro::spawn(f);
        Box::new(move || h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    }
}

/// `select!` with `recv(goro::time::after(d))` racing a sender's
/// `send_timeout(v, d)` at the deadline, thousands of times: the select
/// takes the value exactly when the send succeeds (no lost value, no
/// double delivery), and a lost wake-up hangs the test (watchdog). The
/// sender's busy-wait only moves it towards the deadline; no outcome
/// depends on it.
fn select_after_races(recv_thread: bool, send_thread: bool) {
    let rounds = scale(3000);
    let d = Duration::from_micros(200);
    for i in 0..rounds {
        let (tx, rx) = chan::<usize>(0);
        // Kept until both sides are done: the sender's drop must not close
        // the channel under a receiver still waiting.
        let _keep = tx.clone();
        let rx2 = rx.clone();
        let r = start_on(recv_thread, move || {
            goro::select! {
                recv(rx2) -> v => { Some(v.unwrap()) },
                recv(goro::time::after(d)) -> _t => { None },
            }
        });
        // Most rounds arrive around the deadline (where the timer fires,
        // late by the timer slack), a quarter anywhere in 0..2d.
        let jitter = Duration::from_micros(if i % 4 == 0 {
            ((i * 37) % 400) as u64
        } else {
            150 + ((i * 13) % 200) as u64
        });
        let s = start_on(send_thread, move || {
            let t = Instant::now();
            while t.elapsed() < jitter {
                std::hint::spin_loop();
            }
            tx.send_timeout(i, d)
        });
        let (got, sent) = (r(), s());
        match (got, sent) {
            (Some(v), Ok(())) => assert_eq!(v, i, "round {i}: wrong value"),
            (None, Err(goro::SendTimeoutError::Timeout(v))) => assert_eq!(v, i),
            (got, sent) => panic!(
                "round {i}: inconsistent outcome: select got {got:?}, send ok = {}",
                sent.is_ok()
            ),
        }
        assert!(rx.try_recv().is_err(), "round {i}: a value was left behind");
    }
}

#[test]
fn select_after_races_completion_goroutines() {
    let _w = common::watchdog();
    run(|| select_after_races(false, false));
}

#[test]
fn select_after_races_completion_threads() {
    let _w = common::watchdog();
    select_after_races(true, true);
}

#[test]
fn select_after_races_completion_mixed() {
    let _w = common::watchdog();
    run(|| {
        select_after_races(true, false);
        select_after_races(false, true);
    });
}

/// The timeout entries of waits that completed early stay in the timer
/// heap until their deadline (they are deleted lazily); each is tied to its
/// wait by the goroutine's wait generation. A timeout that fires must leave
/// the generation past every number used so far, or a later wait of the
/// same goroutine can be handed an earlier wait's number and be timed out
/// by that wait's stale entry. Here ten waits complete early, leaving
/// entries due at +2 s (10 s under qemu); one wait times out; the next
/// waits for a value sent only after those entries are due, with a
/// deadline far beyond, so only a stale entry could time it out.
#[test]
fn stale_timeouts_never_end_a_later_wait() {
    let _w = common::watchdog();
    run(|| {
        let me = goro::current_id().unwrap();
        let (tx, rx) = chan::<u32>(0);
        let start = Instant::now();
        // Each of the ten waits must be served before `stale` (it is not
        // retried): long enough that a loaded, slow machine (qemu) does
        // not time one out before its sender runs; the test's point does
        // not depend on the length.
        let stale = Duration::from_secs(if common::qemu() { 10 } else { 2 });
        let sender = goro::spawn(move || {
            for i in 0..10 {
                common::wait_parked(me);
                tx.send(i).unwrap();
            }
            // After every stale entry is due (a scenario, not a sync: the
            // wait below has a deadline of minutes).
            common::wait_parked(me);
            if let Some(left) = (stale + Duration::from_millis(50)).checked_sub(start.elapsed()) {
                goro::time::sleep(left);
            }
            tx.send(99).unwrap();
        });
        for i in 0..10 {
            assert_eq!(rx.recv_timeout(stale), Ok(i));
        }
        let (_none_tx, none_rx) = chan::<u32>(0);
        assert_eq!(
            none_rx.recv_timeout(Duration::from_millis(1)),
            Err(goro::RecvTimeoutError::Timeout)
        );
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(600)),
            Ok(99),
            "a stale timeout ended a later wait"
        );
        sender.join().unwrap();
    });
}

/// Go seeds its random choices per run (startup random bytes, the clock):
/// the same program makes different `select!` choices in two processes.
/// Each child makes 64 choices between two ready arms; two runs agree by
/// chance with probability 2^-64. They agreed every time before session
/// 21 (the seed was the M's id alone).
#[test]
fn select_choices_differ_between_runs() {
    const ENV: &str = "GORO_SELECT_SEED_CHILD";
    if std::env::var(ENV).is_ok() {
        let s = run(|| {
            let (tx1, rx1) = chan::<u8>(1);
            let (tx2, rx2) = chan::<u8>(1);
            (0..64)
                .map(|_| {
                    tx1.send(b'1').unwrap();
                    tx2.send(b'2').unwrap();
                    let v = goro::select! {
                        recv(rx1) -> v => v.unwrap(),
                        recv(rx2) -> v => v.unwrap(),
                    };
                    let _ = (rx1.try_recv(), rx2.try_recv());
                    char::from(v)
                })
                .collect::<String>()
        });
        println!("CHOICES {s}");
        return;
    }
    let choices: Vec<String> = (0..2)
        .map(|_| {
            let out = common::self_test_command("select_choices_differ_between_runs")
                .env(ENV, "1")
                .env("GOMAXPROCS", "1")
                .output()
                .expect("re-executing the test binary");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "{stdout}");
            // The harness prints "test ... " before the child's line.
            stdout
                .split("CHOICES ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or_else(|| panic!("no CHOICES line: {stdout}"))
                .to_string()
        })
        .collect();
    assert_ne!(choices[0], choices[1], "the same choices in two runs");
}

// ---------------------------------------------------------------------------
// Go's channel benchmarks (runtime/chan_test.go) as correctness tests, and
// TestSelectStackAdjust.

/// BenchmarkChanPopular as a test: 1000 goroutines (100 under qemu) each
/// select on a shared "popular" channel and on their own channel, 100
/// rounds; the main goroutine serves the own channels one by one, so every
/// select leaves the popular channel's long wait queue again. Added: a
/// final select in which each goroutine takes exactly one value sent on
/// the popular channel, which finds stale or lost queue entries.
#[test]
fn select_popular_channel() {
    let _w = common::watchdog();
    run(|| {
        let n = scale(1000);
        let rounds = 100;
        let (pop_tx, pop_rx) = chan::<usize>(0);
        let mut own = Vec::new();
        let hs: Vec<_> = (0..n)
            .map(|j| {
                let (d_tx, d_rx) = chan::<usize>(0);
                own.push(d_tx);
                let pop_rx = pop_rx.clone();
                goro::spawn(move || {
                    for i in 0..rounds {
                        goro::select! {
                            recv(pop_rx) -> v => panic!("goroutine {j} round {i}: popular sent {v:?} early"),
                            recv(d_rx) -> v => assert_eq!(v, Ok(i)),
                        }
                    }
                    goro::select! {
                        recv(pop_rx) -> v => v.unwrap(),
                        recv(d_rx) -> v => panic!("goroutine {j}: own channel sent {v:?} at the end"),
                    }
                })
            })
            .collect();
        for i in 0..rounds {
            for d in &own {
                d.send(i).unwrap();
            }
        }
        for k in 0..n {
            pop_tx.send(k).unwrap();
        }
        let mut got: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            (0..n).collect::<Vec<_>>(),
            "popular values lost or doubled"
        );
    });
}

/// BenchmarkSelectProdCons as a test: four producers and four consumers
/// share a 128-slot channel, every send and receive a select that also
/// waits on its own pending `after(1h)` and on a close channel that never
/// closes (local work in between, as in Go); each producer ends with a 0,
/// each consumer stops at the first 0. Every value is received, and
/// neither the timers nor the close channel are ever chosen.
#[test]
fn select_prod_cons_with_timers() {
    let _w = common::watchdog();
    run(|| {
        let procs = 4;
        let per = scale(100_000) as u64;
        let (myc_tx, myc_rx) = chan::<u64>(128);
        let (close_tx, close_rx) = chan::<()>(0);
        let mut hs = Vec::new();
        for _ in 0..procs {
            let (myc_tx, close) = (myc_tx.clone(), close_rx.clone());
            hs.push(goro::spawn(move || {
                let mytimer = goro::time::after(Duration::from_secs(3600));
                let mut foo = 1u64;
                for _ in 0..per {
                    for _ in 0..100 {
                        foo = std::hint::black_box(foo * 2) / 2;
                    }
                    goro::select! {
                        send(myc_tx, 1) -> r => r.unwrap(),
                        recv(mytimer) -> _ => panic!("producer: the 1h timer fired"),
                        recv(close) -> _ => panic!("producer: close channel ready"),
                    }
                }
                myc_tx.send(0).unwrap();
                (per, foo)
            }));
            let (myc_rx, close) = (myc_rx.clone(), close_rx.clone());
            hs.push(goro::spawn(move || {
                let mytimer = goro::time::after(Duration::from_secs(3600));
                let mut foo = 1u64;
                let mut got = 0;
                loop {
                    let v = goro::select! {
                        recv(myc_rx) -> v => v.unwrap(),
                        recv(mytimer) -> _ => panic!("consumer: the 1h timer fired"),
                        recv(close) -> _ => panic!("consumer: close channel ready"),
                    };
                    if v == 0 {
                        break;
                    }
                    got += v;
                    for _ in 0..100 {
                        foo = std::hint::black_box(foo * 2) / 2;
                    }
                }
                (got, foo)
            }));
        }
        let mut sent = 0;
        let mut received = 0;
        for (k, h) in hs.into_iter().enumerate() {
            let (count, foo) = h.join().unwrap();
            assert_eq!(foo, 1);
            if k % 2 == 0 {
                sent += count;
            } else {
                received += count;
            }
        }
        assert_eq!(received, sent);
        assert!(myc_rx.is_empty());
        drop(close_tx);
    });
}

/// TestSelectStackAdjust, with goro's shrinker for Go's GC (goro stacks do
/// not move, so the shrinker releases the dead pages below a parked
/// goroutine's stack pointer instead): two goroutines grow their stacks
/// ~64 KiB, then block in select (one with every case twice) with a
/// 512-byte local in the selecting frame; once both are parked and stacks
/// have been shrunk, one gets a value on `d`, the other sees `d` closed.
/// The received values and the locals must be intact.
#[test]
fn select_stack_adjust() {
    let _w = common::watchdog();
    let _s = aggressive_shrink();
    run(|| {
        let (_c_tx, c_rx) = chan::<u64>(0);
        let (d_tx, d_rx) = chan::<u64>(0);
        let gs: Vec<_> = [false, true]
            .into_iter()
            .map(|dup| {
                let (c_rx, d_rx) = (c_rx.clone(), d_rx.clone());
                goro::spawn(move || {
                    // Temporarily grow the stack.
                    stack_growth_recursive(64);
                    let val = std::hint::black_box([42u64; 64]);
                    let cx = if dup {
                        goro::select! {
                            recv(c_rx) -> v => v,
                            recv(c_rx) -> v => v,
                            recv(d_rx) -> v => v,
                            recv(d_rx) -> v => v,
                        }
                    } else {
                        goro::select! {
                            recv(c_rx) -> v => v,
                            recv(d_rx) -> v => v,
                        }
                    };
                    let val = std::hint::black_box(val);
                    assert!(
                        val.iter().all(|&v| v == 42),
                        "dup {dup}: local changed: {val:?}"
                    );
                    cx
                })
            })
            .collect();
        let s0 = goro::__private::stack_shrinks().0;
        for g in &gs {
            common::wait_parked(g.id());
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        // Polling the shrinker's counter (it works on its own clock).
        while goro::__private::stack_shrinks().0 < s0 + 2 && Instant::now() < deadline {
            goro::time::sleep(Duration::from_millis(1));
        }
        d_tx.send(0x5e1ec7).unwrap();
        d_tx.close();
        let mut got: Vec<_> = gs.into_iter().map(|g| g.join().unwrap()).collect();
        got.sort_by_key(|r| r.is_ok());
        assert_eq!(got, vec![Err(RecvError), Ok(0x5e1ec7)]);
        assert!(
            goro::__private::stack_shrinks().0 > s0,
            "the shrinker never released a stack"
        );
    });
}

/// `select_recv`: a fan-in over a run-time number of channels (Go's
/// reflect.Select). 100 producers send 200 numbered values each and close;
/// the consumer drops each channel as it reports closed. Every value
/// arrives exactly once, each channel's in order.
#[test]
fn select_recv_fans_in_a_runtime_list() {
    let _w = common::watchdog();
    run(|| {
        const N: usize = 100;
        const PER: u64 = 200;
        let mut rxs = Vec::new();
        let mut ids = Vec::new();
        for p in 0..N {
            let (tx, rx) = chan::<u64>(p % 3);
            goro::spawn(move || {
                for k in 0..PER {
                    tx.send(k).unwrap();
                }
            });
            rxs.push(rx);
            ids.push(p);
        }
        let mut next = vec![0u64; N];
        let mut total = 0;
        while !rxs.is_empty() {
            let (i, r) = goro::select_recv(&rxs);
            match r {
                Ok(k) => {
                    assert_eq!(k, next[ids[i]], "producer {} out of order", ids[i]);
                    next[ids[i]] += 1;
                    total += 1;
                }
                Err(RecvError) => {
                    rxs.swap_remove(i);
                    ids.swap_remove(i);
                }
            }
        }
        assert_eq!(total, N as u64 * PER);
        assert!(next.iter().all(|&n| n == PER));
    });
}

/// `select_recv` chooses uniformly among ready channels, as `select!`.
#[test]
fn select_recv_fairness() {
    let _w = common::watchdog();
    run(|| {
        let (tx0, rx0) = chan::<usize>(1);
        let (tx1, rx1) = chan::<usize>(1);
        let (_idle_tx, idle) = chan::<usize>(0);
        let rxs = [&idle, &rx0, &idle, &rx1];
        let mut counts = [0usize; 2];
        tx0.send(0).unwrap();
        tx1.send(1).unwrap();
        for _ in 0..10_000 {
            let (i, v) = goro::select_recv(rxs);
            let v = v.unwrap();
            assert_eq!(i, [1, 3][v]);
            counts[v] += 1;
            [&tx0, &tx1][v].send(v).unwrap();
        }
        assert_uniformish(&counts, "select_recv");
    });
}

/// `try_select_recv` never waits; `select_recv_timeout` waits at most its
/// timeout; both report "nothing" as None, also for an empty list; a
/// closed channel is ready with Err. From a goroutine and a plain thread.
#[test]
fn select_recv_default_and_timeout() {
    let _w = common::watchdog();
    fn check() {
        let (tx, rx) = chan::<i32>(1);
        let (_tx2, rx2) = chan::<i32>(0);
        assert_eq!(goro::try_select_recv([&rx, &rx2]), None);
        let none: [&goro::Receiver<i32>; 0] = [];
        assert_eq!(goro::try_select_recv(none), None);
        assert_eq!(
            goro::select_recv_timeout(none, Duration::from_millis(1)),
            None
        );
        let t = Instant::now();
        assert_eq!(
            goro::select_recv_timeout([&rx, &rx2], Duration::from_millis(20)),
            None
        );
        assert!(t.elapsed() >= Duration::from_millis(20));
        tx.send(5).unwrap();
        assert_eq!(goro::try_select_recv([&rx2, &rx]), Some((1, Ok(5))));
        tx.send(6).unwrap();
        assert_eq!(
            goro::select_recv_timeout([&rx2, &rx], Duration::from_secs(60)),
            Some((1, Ok(6)))
        );
        tx.close();
        assert_eq!(
            goro::try_select_recv([&rx2, &rx]),
            Some((1, Err(RecvError)))
        );
        assert_eq!(goro::select_recv([&rx]), (0, Err(RecvError)));
    }
    run(check);
    check();
}

/// A value that counts its drops, to check that a dynamic select drops
/// each value exactly once: unsent values with the select, a received
/// value the caller never read with the operation.
struct Counted(u32, Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

/// `goro::Select` (Go's reflect.Select with send and receive cases): cases
/// of different element types, in both directions; the chosen operation
/// has happened, its result is read back typed; values are dropped once.
#[test]
fn dynamic_select_mixes_types_and_directions() {
    fn check() {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx_n, rx_n) = chan::<u32>(1);
        let (tx_s, rx_s) = chan::<Counted>(0); // nobody receives: never ready
        tx_n.send(7).unwrap();
        let mut sel = goro::Select::new();
        let r = sel.recv(&rx_n);
        let s = sel.send(&tx_s, Counted(1, drops.clone()));
        assert_eq!((r, s), (0, 1));
        let op = sel.select();
        assert_eq!(op.index(), r);
        assert_eq!(op.recv(&rx_n), Ok(7));
        assert_eq!(drops.load(SeqCst), 1, "the unsent value is dropped once");

        // A send case chosen: the value arrives, nothing is dropped.
        let (tx_b, rx_b) = chan::<Counted>(1);
        let mut sel = goro::Select::new();
        sel.recv(&rx_n); // empty
        let s = sel.send(&tx_b, Counted(2, drops.clone()));
        let op = sel.select();
        assert_eq!(op.index(), s);
        assert!(op.send(&tx_b).is_ok());
        assert_eq!(drops.load(SeqCst), 1);
        assert_eq!(rx_b.recv().unwrap().0, 2);
        assert_eq!(drops.load(SeqCst), 2);

        // A received value that is never read is dropped with the
        // operation.
        tx_b.send(Counted(3, drops.clone())).unwrap();
        let mut sel = goro::Select::new();
        sel.recv(&rx_b);
        drop(sel.select());
        assert_eq!(drops.load(SeqCst), 3);

        // A send on a closed channel is chosen and gives the value back.
        drop(rx_s);
        let mut sel = goro::Select::new();
        sel.recv(&rx_n);
        let s = sel.send(&tx_s, Counted(4, drops.clone()));
        let op = sel.select();
        assert_eq!(op.index(), s);
        let back = op.send(&tx_s).unwrap_err().0;
        assert_eq!(back.0, 4);
        assert_eq!(drops.load(SeqCst), 3);
        drop(back);

        // A closed, drained channel: Err(RecvError).
        tx_n.close();
        let mut sel = goro::Select::new();
        sel.recv(&rx_n);
        assert_eq!(sel.select().recv(&rx_n), Err(RecvError));

        // Nothing ready: try_select is None, select_timeout gives up, and
        // both drop the unsent values.
        let (tx_e, _rx_e) = chan::<Counted>(0);
        let before = drops.load(SeqCst);
        let mut sel = goro::Select::new();
        sel.send(&tx_e, Counted(5, drops.clone()));
        assert!(sel.try_select().is_none());
        let mut sel = goro::Select::new();
        sel.send(&tx_e, Counted(6, drops.clone()));
        let t = Instant::now();
        assert!(sel.select_timeout(Duration::from_millis(20)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(drops.load(SeqCst), before + 2);
        assert!(goro::Select::new().try_select().is_none());
    }
    run(check);
    check();
}

/// A blocked dynamic select is completed by the other side: a receiver
/// that arrives later takes the send case's value; a sender that arrives
/// later fills the receive case.
#[test]
fn dynamic_select_parks_until_a_case_is_ready() {
    run(|| {
        for round in 0..200u32 {
            let (tx_a, rx_a) = chan::<u32>(0);
            let (tx_b, rx_b) = chan::<String>(0);
            let other = goro::spawn(move || {
                for _ in 0..4 {
                    goro::yield_now();
                }
                if round % 2 == 0 {
                    tx_a.send(round).unwrap();
                    None
                } else {
                    Some(rx_b.recv().unwrap())
                }
            });
            let mut sel = goro::Select::new();
            let r = sel.recv(&rx_a);
            let s = sel.send(&tx_b, format!("v{round}"));
            let op = sel.select();
            if round % 2 == 0 {
                assert_eq!(op.index(), r);
                assert_eq!(op.recv(&rx_a), Ok(round));
                assert_eq!(other.join().unwrap(), None);
            } else {
                assert_eq!(op.index(), s);
                assert!(op.send(&tx_b).is_ok());
                assert_eq!(other.join().unwrap(), Some(format!("v{round}")));
            }
        }
    });
}

/// Ready cases are chosen uniformly (TestSelectFairness's bound).
#[test]
fn dynamic_select_fairness() {
    run(|| {
        let (tx1, rx1) = chan::<u8>(1);
        let (tx2, _rx2) = chan::<u16>(1); // room for one send each round
        let (mut recvs, mut sends) = (0, 0);
        let trials = 10_000;
        for _ in 0..trials {
            tx1.send(1).unwrap();
            let mut sel = goro::Select::new();
            sel.recv(&rx1);
            sel.send(&tx2, 2);
            let op = sel.select();
            if op.index() == 0 {
                recvs += 1;
                drop(op);
            } else {
                sends += 1;
                assert!(op.send(&tx2).is_ok());
                assert_eq!(_rx2.recv(), Ok(2));
                assert_eq!(rx1.recv(), Ok(1));
            }
        }
        assert!(
            recvs > trials * 4 / 10 && sends > trials * 4 / 10,
            "unfair: {recvs} receives, {sends} sends"
        );
    });
}

/// Reading the result as the wrong case (another channel, the other
/// direction) panics instead of reading the wrong slot.
#[test]
fn dynamic_select_wrong_case_panics() {
    let (tx, rx) = chan::<u32>(1);
    let (_tx2, rx2) = chan::<u32>(1);
    tx.send(1).unwrap();
    let mut sel = goro::Select::new();
    sel.recv(&rx);
    let op = sel.select();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.recv(&rx2)));
    assert!(r.is_err());
    tx.send(2).unwrap();
    let mut sel = goro::Select::new();
    sel.recv(&rx);
    let op = sel.select();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.send(&tx)));
    assert!(r.is_err());
}

/// Go's way to turn a case off and on: `out = nil` in the send case's own
/// body. A send arm's body may reassign or move the channel it sent on.
/// Before (session 29, h39): did not compile, "cannot assign to `out`
/// because it is borrowed ... when `__slot` is dropped and runs the `Drop`
/// code for type `goro::__private::SendSlot`" (E0506; E0505 for `drop`),
/// where crossbeam's `select!` accepts both.
#[test]
fn send_arm_body_may_reassign_or_move_its_sender() {
    run(|| {
        let (in_tx, in_rx) = chan::<i32>(4);
        let (real_tx, real_rx) = chan::<i32>(4);
        // A case that never proceeds: its receiver is kept, its buffer full.
        let (dead_tx, _dead_rx) = chan::<i32>(0);
        for v in [5, 6] {
            in_tx.send(v).unwrap();
        }
        // One value in flight: while it is pending the input case is off
        // (`never()`, Go's nil channel) and the send case on, and back.
        let mut input = in_rx.clone();
        let mut out = dead_tx.clone();
        let mut pending = 0;
        let mut sent = vec![];
        for _ in 0..4 {
            goro::select! {
                recv(input) -> v => {
                    pending = v.unwrap();
                    input = goro::never();
                    out = real_tx.clone(); // enable the send case
                }
                send(out, pending) -> r => {
                    r.unwrap();
                    sent.push(pending);
                    out = dead_tx.clone(); // disable it again
                    input = in_rx.clone();
                }
            }
        }
        assert_eq!(sent, [5, 6]);
        assert_eq!(real_rx.try_recv(), Ok(5));
        assert_eq!(real_rx.try_recv(), Ok(6));
        let (tx, rx) = chan::<i32>(1);
        let got = goro::select! {
            send(tx, 1) -> r => {
                r.unwrap();
                drop(tx); // the arm's own sender, moved out
                rx.recv()
            }
        };
        assert_eq!(got, Ok(1));
    });
}

/// The values of send cases not chosen are dropped before the chosen
/// case's body runs: a body that waits for a channel whose last Sender was
/// such a value sees it closed. Before (session 29, h39): the value lived
/// until after the body, which waited for ever (here: until its 10 s
/// bound, then failed).
#[test]
fn unchosen_send_values_are_dropped_before_the_body() {
    run(|| {
        let (ready_tx, ready_rx) = chan::<i32>(1);
        ready_tx.send(1).unwrap();
        // A send case that cannot proceed (unbuffered, nobody receiving)
        // whose value is the last Sender of `c`.
        let (full_tx, _full_rx) = chan::<goro::Sender<()>>(0);
        let (c_tx, c_rx) = chan::<()>(0);
        let closed = goro::select! {
            recv(ready_rx) -> v => {
                assert_eq!(v, Ok(1));
                goro::select! {
                    recv(c_rx) -> r => r.is_err(),
                    default(Duration::from_secs(10)) => false,
                }
            }
            send(full_tx, c_tx) -> _ => unreachable!(),
        };
        assert!(
            closed,
            "the unchosen case's Sender was still alive in the body"
        );
    });
}

/// A send case not chosen whose value's destructor panics does not leak
/// the value the chosen receive case took: it is dropped while the panic
/// unwinds (as every other slot is), whatever the arms' order. Also the
/// dynamic `Select`'s `SelectedOperation::recv`. Before (h41): with the
/// send arm written first, `select!` dropped each slot in turn right after
/// finishing it, so the panic came before the receive slot (a
/// `MaybeUninit`, no destructor) had handed its value out, and the value
/// leaked: 1 drop instead of 2.
#[test]
fn panicking_drop_of_an_unchosen_send_value_leaks_nothing() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    type D = common::CountedDrop;
    fn d(panics: bool) -> D {
        D {
            drops: &DROPS,
            panics,
        }
    }
    run(|| {
        for send_first in [true, false] {
            DROPS.store(0, SeqCst);
            // Exactly one ready case: the receive (the send is unbuffered
            // with nobody receiving).
            let (tx, rx) = chan::<D>(1);
            let (idle_tx, _idle_rx) = chan::<D>(0);
            tx.send(d(false)).unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if send_first {
                    goro::select! {
                        send(idle_tx, d(true)) -> _ => unreachable!(),
                        recv(rx) -> v => drop(v),
                    }
                } else {
                    goro::select! {
                        recv(rx) -> v => drop(v),
                        send(idle_tx, d(true)) -> _ => unreachable!(),
                    }
                }
            }));
            assert!(r.is_err(), "the destructor's panic was swallowed");
            assert_eq!(DROPS.load(SeqCst), 2, "select!, send_first {send_first}");
        }
        DROPS.store(0, SeqCst);
        let (tx, rx) = chan::<D>(1);
        let (idle_tx, _idle_rx) = chan::<D>(0);
        tx.send(d(false)).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut sel = goro::Select::new();
            sel.send(&idle_tx, d(true));
            let i = sel.recv(&rx);
            let op = sel.select();
            assert_eq!(op.index(), i);
            drop(op.recv(&rx));
        }));
        assert!(r.is_err(), "the destructor's panic was swallowed");
        assert_eq!(DROPS.load(SeqCst), 2, "dynamic Select, recv");
        // The value of a chosen send on a closed channel, handed back in
        // `SendError`.
        DROPS.store(0, SeqCst);
        let (closed_tx, closed_rx) = chan::<D>(0);
        closed_tx.close();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut sel = goro::Select::new();
            sel.send(&idle_tx, d(true));
            let i = sel.send(&closed_tx, d(false));
            let op = sel.select();
            assert_eq!(op.index(), i);
            drop(op.send(&closed_tx));
        }));
        assert!(r.is_err(), "the destructor's panic was swallowed");
        assert_eq!(DROPS.load(SeqCst), 2, "dynamic Select, send");
        drop(closed_rx);
    });
}

/// Trailing commas inside the operation's parentheses (`recv(rx,)`,
/// `send(tx, v,)`, `default(d,)`) and after `go!`'s closure, as rustfmt
/// and macro-generated code write them: each form compiles and selects
/// the ready case.
#[test]
fn trailing_commas_in_arms() {
    run(|| {
        let (tx, rx) = chan::<i32>(1);
        let sent = goro::select! {
            send(tx, 7,) -> r => r.is_ok(),
            default => false,
        };
        assert!(sent);
        let got = goro::select! {
            recv(rx,) -> v => v.ok(),
            default(Duration::from_secs(60),) => None,
        };
        assert_eq!(got, Some(7));
        let timed_out = goro::select! {
            recv(rx,) -> _v => false,
            default(Duration::from_millis(1),) => true,
        };
        assert!(timed_out);
        assert_eq!(goro::go!(move || 5,).join().unwrap(), 5);
    });
}
