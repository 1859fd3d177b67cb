//! Channel tests ported from Go's runtime/chan_test.go (TestChan and its
//! sub-parts, TestNonblockRecvRace, TestNonblockSelectRace{,2},
//! TestMultiConsumer, TestShrinkStackDuringBlockedSend), plus close/exactly-once
//! invariants. Select-specific ports live in tests/select.rs, API-level channel
//! checks in tests/api.rs.
//!
//! Also ported: TestChanSendBarrier and TestChanSendSelectBarrier
//! (runtime/chanbarrier_test.go; GC write barriers there, delivery of
//! heap values from short-lived goroutines here), and
//! TestShrinkStackDuringBlockedSend / TestNoShrinkStackWhileParking with
//! goro's stack shrinker (runtime/shrink.rs, turned to its stress setting
//! through `goro::__private::set_stack_shrink`) in place of Go's GC.
//!
//! Every test body runs inside `goro::run`. Where Go's test uses
//! `time.Sleep(time.Millisecond)` to give a wrongly-woken goroutine the chance
//! to show itself, `let_others_run` does the same; it never orders events:
//! every assertion holds for any interleaving of a correct runtime.

mod common;
use common::{aggressive_shrink, qemu, run, scale, stack_growth_recursive};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use goro::{chan, RecvError, SendError, TryRecvError, TrySendError};

/// Go's TestChan loops chanCap over 0..200 (a subset under qemu).
fn capacities() -> Vec<usize> {
    if qemu() {
        vec![0, 1, 2, 5, 17, 64, 199]
    } else {
        (0..200).collect()
    }
}

/// Give other goroutines a chance to run (Go's `time.Sleep(time.Millisecond)`
/// in TestChan). Not synchronisation: used only before asserting that
/// something has *not* happened.
fn let_others_run() {
    for _ in 0..8 {
        goro::yield_now();
    }
    goro::time::sleep(Duration::from_millis(1));
}

// ---------------------------------------------------------------------------
// TestChan, split into its sub-parts.

/// TestChan: receive from an empty channel blocks; non-blocking receive does
/// not block.
#[test]
fn chan_recv_from_empty_blocks() {
    let _w = common::watchdog();
    run(|| {
        for cap in capacities() {
            let (tx, rx) = chan::<i32>(cap);
            let recv1 = Arc::new(AtomicBool::new(false));
            let recv2 = Arc::new(AtomicBool::new(false));
            let h1 = {
                let (rx, f) = (rx.clone(), recv1.clone());
                goro::spawn(move || {
                    let _ = rx.recv();
                    f.store(true, SeqCst);
                })
            };
            let h2 = {
                let (rx, f) = (rx.clone(), recv2.clone());
                goro::spawn(move || {
                    let r = rx.recv();
                    f.store(true, SeqCst);
                    r
                })
            };
            let_others_run();
            assert!(
                !recv1.load(SeqCst) && !recv2.load(SeqCst),
                "chan[{cap}]: receive from empty chan"
            );
            // Non-blocking receive does not block.
            goro::select! {
                recv(rx) -> _v => { panic!("chan[{cap}]: receive from empty chan (select)") },
                default => {},
            }
            let got: Option<Result<i32, RecvError>> = goro::select! {
                recv(rx) -> v => { Some(v) },
                default => { None },
            };
            assert!(
                got.is_none(),
                "chan[{cap}]: receive from empty chan (select 2)"
            );
            assert!(
                matches!(rx.try_recv(), Err(TryRecvError::Empty)),
                "chan[{cap}]: try_recv on empty chan"
            );
            tx.send(0).unwrap();
            tx.send(0).unwrap();
            h1.join().unwrap();
            assert_eq!(h2.join().unwrap().unwrap(), 0);
            assert!(recv1.load(SeqCst) && recv2.load(SeqCst));
        }
    });
}

/// TestChan: send to a full channel blocks; non-blocking send does not block.
#[test]
fn chan_send_to_full_blocks() {
    let _w = common::watchdog();
    run(|| {
        for cap in capacities() {
            let (tx, rx) = chan::<i32>(cap);
            for i in 0..cap {
                tx.send(i as i32).unwrap();
            }
            let sent = Arc::new(AtomicBool::new(false));
            let h = {
                let (tx, sent) = (tx.clone(), sent.clone());
                goro::spawn(move || {
                    tx.send(-1).unwrap();
                    sent.store(true, SeqCst);
                })
            };
            let_others_run();
            assert!(!sent.load(SeqCst), "chan[{cap}]: send to full chan");
            // Non-blocking send does not block.
            goro::select! {
                send(tx, 7) -> _r => { panic!("chan[{cap}]: send to full chan (select)") },
                default => {},
            }
            match tx.try_send(8) {
                Err(TrySendError::Full(8)) => {}
                Err(TrySendError::Full(v)) => panic!("chan[{cap}]: Full returned {v}, not 8"),
                Err(TrySendError::Closed(_)) => panic!("chan[{cap}]: Closed on open chan"),
                Ok(()) => panic!("chan[{cap}]: try_send to full chan succeeded"),
            }
            assert_eq!(rx.len(), cap, "chan[{cap}]: len of full chan");
            let first = rx.recv().unwrap();
            if cap == 0 {
                assert_eq!(first, -1);
            } else {
                assert_eq!(first, 0);
            }
            h.join().unwrap();
            assert!(sent.load(SeqCst));
            // FIFO: the blocked sender's value comes after the buffered ones.
            for i in 1..cap {
                assert_eq!(rx.recv().unwrap(), i as i32);
            }
            if cap > 0 {
                assert_eq!(rx.recv().unwrap(), -1);
            }
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        }
    });
}

/// TestChan: buffered values are delivered after close, then receive reports
/// closed (Go's zero value / ok == false).
#[test]
fn chan_recv_from_closed() {
    let _w = common::watchdog();
    run(|| {
        for cap in capacities() {
            let (tx, rx) = chan::<i32>(cap);
            for i in 0..cap {
                tx.send(i as i32).unwrap();
            }
            tx.close();
            assert!(rx.is_closed() && tx.is_closed());
            for i in 0..cap {
                assert_eq!(rx.recv(), Ok(i as i32), "chan[{cap}]");
            }
            assert_eq!(rx.recv(), Err(RecvError), "chan[{cap}]");
            assert_eq!(rx.recv(), Err(RecvError), "chan[{cap}]");
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Closed)));
        }
    });
}

/// TestChan: close unblocks a blocked receiver.
#[test]
fn chan_close_unblocks_recv() {
    let _w = common::watchdog();
    run(|| {
        for cap in capacities() {
            let (tx, rx) = chan::<i32>(cap);
            let h = goro::spawn(move || rx.recv());
            let_others_run();
            tx.close();
            assert_eq!(h.join().unwrap(), Err(RecvError), "chan[{cap}]");
        }
    });
}

/// TestChan: 100 integers from one sender arrive uncorrupted in FIFO order
/// (with recv and with iter), then 4 senders x L values through 4 receivers
/// arrive exactly once each.
#[test]
fn chan_fifo_and_mpmc() {
    let _w = common::watchdog();
    run(|| {
        const P: usize = 4;
        let l = scale(1000);
        for cap in capacities() {
            let (tx, rx) = chan::<usize>(cap);
            let h = {
                let tx = tx.clone();
                goro::spawn(move || {
                    for i in 0..100 {
                        tx.send(i).unwrap();
                    }
                })
            };
            for i in 0..100 {
                assert_eq!(rx.recv().unwrap(), i, "chan[{cap}]");
            }
            h.join().unwrap();

            // Same, through the iterator.
            let h = {
                let tx = tx.clone();
                goro::spawn(move || {
                    for i in 0..100 {
                        tx.send(i).unwrap();
                    }
                })
            };
            let got: Vec<usize> = rx.iter().take(100).collect();
            assert_eq!(got, (0..100).collect::<Vec<_>>(), "chan[{cap}]");
            h.join().unwrap();

            // P senders, P receivers.
            let senders: Vec<_> = (0..P)
                .map(|_| {
                    let tx = tx.clone();
                    goro::spawn(move || {
                        for i in 0..l {
                            tx.send(i).unwrap();
                        }
                    })
                })
                .collect();
            let receivers: Vec<_> = (0..P)
                .map(|_| {
                    let rx = rx.clone();
                    goro::spawn(move || {
                        let mut recv: HashMap<usize, usize> = HashMap::new();
                        for _ in 0..l {
                            *recv.entry(rx.recv().unwrap()).or_default() += 1;
                        }
                        recv
                    })
                })
                .collect();
            let mut recv: HashMap<usize, usize> = HashMap::new();
            for h in receivers {
                for (k, v) in h.join().unwrap() {
                    *recv.entry(k).or_default() += v;
                }
            }
            for h in senders {
                h.join().unwrap();
            }
            assert_eq!(
                recv.len(),
                l,
                "chan[{cap}]: received {} distinct values",
                recv.len()
            );
            for (k, v) in recv {
                assert_eq!(
                    v, P,
                    "chan[{cap}]: value {k} received {v} times, expected {P}"
                );
            }
        }
    });
}

/// TestChan: len/cap.
#[test]
fn chan_len_cap() {
    let _w = common::watchdog();
    run(|| {
        for cap in capacities() {
            let (tx, rx) = chan::<i32>(cap);
            assert_eq!((rx.len(), rx.capacity()), (0, cap));
            assert_eq!((tx.len(), tx.capacity()), (0, cap));
            for i in 0..cap {
                tx.send(i as i32).unwrap();
            }
            assert_eq!((rx.len(), rx.capacity()), (cap, cap));
            assert_eq!((tx.len(), tx.capacity()), (cap, cap));
        }
    });
}

// ---------------------------------------------------------------------------

/// TestNonblockRecvRace: a value buffered before close must be seen by a
/// non-blocking receive racing with close (either the value or "closed", but
/// never "not ready").
#[test]
fn nonblock_recv_race() {
    let _w = common::watchdog();
    run(|| {
        for i in 0..scale(10_000) {
            let (tx, rx) = chan::<i32>(1);
            tx.send(1).unwrap();
            let h = {
                let rx = rx.clone();
                goro::spawn(move || {
                    goro::select! {
                        recv(rx) -> _v => { true },
                        default => { false },
                    }
                })
            };
            tx.close();
            let _ = rx.recv();
            assert!(h.join().unwrap(), "iteration {i}: chan is not ready");
        }
    });
}

/// TestNonblockSelectRace: select acts on the state of the channels at one
/// moment; from the goroutine's creation on, c1 or c2 is always ready, so the
/// default case must never run.
#[test]
fn nonblock_select_race() {
    let _w = common::watchdog();
    run(|| {
        let (done_tx, done_rx) = chan::<bool>(1);
        for i in 0..scale(100_000) {
            let (c1_tx, c1_rx) = chan::<i32>(1);
            let (c2_tx, c2_rx) = chan::<i32>(1);
            c1_tx.send(1).unwrap();
            let h = {
                let (c1_rx, c2_rx, done_tx) = (c1_rx.clone(), c2_rx.clone(), done_tx.clone());
                goro::spawn(move || {
                    let ok = goro::select! {
                        recv(c1_rx) -> _v => { true },
                        recv(c2_rx) -> _v => { true },
                        default => { false },
                    };
                    done_tx.send(ok).unwrap();
                })
            };
            c2_tx.send(1).unwrap();
            goro::select! {
                recv(c1_rx) -> _v => {},
                default => {},
            }
            assert!(done_rx.recv().unwrap(), "iteration {i}: no chan is ready");
            h.join().unwrap();
        }
    });
}

/// TestNonblockSelectRace2: as above, but close(c2) replaces c2 <- 1.
#[test]
fn nonblock_select_race2() {
    let _w = common::watchdog();
    run(|| {
        let (done_tx, done_rx) = chan::<bool>(1);
        for i in 0..scale(100_000) {
            let (c1_tx, c1_rx) = chan::<i32>(1);
            let (c2_tx, c2_rx) = chan::<i32>(0);
            c1_tx.send(1).unwrap();
            let h = {
                let (c1_rx, c2_rx, done_tx) = (c1_rx.clone(), c2_rx.clone(), done_tx.clone());
                goro::spawn(move || {
                    let ok = goro::select! {
                        recv(c1_rx) -> _v => { true },
                        recv(c2_rx) -> _v => { true },
                        default => { false },
                    };
                    done_tx.send(ok).unwrap();
                })
            };
            c2_tx.close();
            goro::select! {
                recv(c1_rx) -> _v => {},
                default => {},
            }
            assert!(done_rx.recv().unwrap(), "iteration {i}: no chan is ready");
            h.join().unwrap();
        }
    });
}

/// TestMultiConsumer: 23 workers ranging over a work queue, a feeder that
/// closes the queue, waits for the workers and closes the results channel.
#[test]
fn multi_consumer() {
    let _w = common::watchdog();
    run(|| {
        const NWORK: usize = 23;
        let niter = scale(271_828);
        const PN: [usize; 10] = [2, 3, 7, 11, 13, 17, 19, 23, 27, 31];

        let (q_tx, q_rx) = chan::<usize>(NWORK * 3);
        let (r_tx, r_rx) = chan::<usize>(NWORK * 3);

        let workers: Vec<_> = (0..NWORK)
            .map(|w| {
                let (q_rx, r_tx) = (q_rx.clone(), r_tx.clone());
                goro::spawn(move || {
                    for v in &q_rx {
                        // Mess with the fifo-ish nature of range.
                        if PN[w % PN.len()] == v {
                            goro::yield_now();
                        }
                        r_tx.send(v).unwrap();
                    }
                })
            })
            .collect();
        drop(q_rx);

        let feeder = goro::spawn(move || {
            let mut expect = 0;
            for i in 0..niter {
                let v = PN[i % PN.len()];
                expect += v;
                q_tx.send(v).unwrap();
            }
            q_tx.close(); // no more work
            for w in workers {
                w.join().unwrap(); // workers done
            }
            r_tx.close(); // ... so there can be no more results
            expect
        });

        let (mut n, mut s) = (0, 0);
        for v in r_rx.iter() {
            n += 1;
            s += v;
        }
        let expect = feeder.join().unwrap();
        assert_eq!(
            (n, s),
            (niter, expect),
            "expected sum {expect} from {niter} iterations"
        );
    });
}

/// TestShrinkStackDuringBlockedSend, goro flavour: the sender uses lots of
/// stack between sends of large values while the receiver takes its time, so
/// rendezvous copies out of a parked sender (whose value lives on its own
/// stack) are exercised alongside stack use.
#[test]
fn blocked_send_with_stack_use() {
    let _w = common::watchdog();
    run(|| {
        const N: usize = 10;
        let (tx, rx) = chan::<[u64; 64]>(0);
        let h = goro::spawn(move || {
            for i in 0..N {
                tx.send([i as u64; 64]).unwrap();
                // Use lots of stack, briefly.
                stack_growth_recursive(20);
            }
        });
        for i in 0..N {
            let x = rx.recv().unwrap();
            assert!(
                x.iter().all(|&v| v == i as u64),
                "bad channel read {i}: {x:?}"
            );
            let_others_run();
        }
        h.join().unwrap();
    });
}

// ---------------------------------------------------------------------------
// Close with blocked peers: every value is delivered or handed back, exactly once.

/// Senders blocked on a channel get their own value back in `SendError` when
/// it is closed; each value is either received or returned, never both or
/// neither.
#[test]
fn close_with_blocked_senders_exactly_once() {
    let _w = common::watchdog();
    run(|| {
        for cap in [0usize, 1, 3, 16] {
            let (tx, rx) = chan::<usize>(cap);
            let n = 32;
            let senders: Vec<_> = (0..n)
                .map(|i| {
                    let tx = tx.clone();
                    goro::spawn(move || match tx.send(i) {
                        Ok(()) => None,
                        Err(SendError(v)) => Some(v),
                    })
                })
                .collect();
            // Receive a few while senders are (possibly) blocked.
            let mut delivered: Vec<usize> = (0..4).map(|_| rx.recv().unwrap()).collect();
            let_others_run();
            tx.close();
            let mut returned = Vec::new();
            for (i, h) in senders.into_iter().enumerate() {
                if let Some(v) = h.join().unwrap() {
                    assert_eq!(
                        v, i,
                        "chan[{cap}]: SendError carried another sender's value"
                    );
                    returned.push(v);
                }
            }
            delivered.extend(rx.iter());
            let mut all = delivered.clone();
            all.extend(&returned);
            all.sort_unstable();
            assert_eq!(
                all,
                (0..n).collect::<Vec<_>>(),
                "chan[{cap}]: delivered {delivered:?} returned {returned:?}"
            );
            assert!(delivered.len() >= 4);
        }
    });
}

/// Receivers blocked on a channel all wake with `Err` when it is closed.
#[test]
fn close_wakes_all_blocked_receivers() {
    let _w = common::watchdog();
    run(|| {
        for cap in [0usize, 4] {
            let (tx, rx) = chan::<i32>(cap);
            let hs: Vec<_> = (0..64)
                .map(|_| {
                    let rx = rx.clone();
                    goro::spawn(move || rx.recv())
                })
                .collect();
            // Every receiver really parked: close wakes them, rather than
            // them finding the channel closed on arrival.
            for h in &hs {
                common::wait_parked(h.id());
            }
            tx.close();
            for h in hs {
                assert_eq!(h.join().unwrap(), Err(RecvError));
            }
        }
    });
}

/// Values larger than a cache line and zero-sized values survive unbuffered
/// and buffered transfer.
#[test]
fn large_and_zero_sized_values() {
    let _w = common::watchdog();
    run(|| {
        for cap in [0usize, 1, 8] {
            let (tx, rx) = chan::<Box<[u8; 8192]>>(cap);
            let (btx, brx) = chan::<[u32; 1024]>(cap);
            let (ztx, zrx) = chan::<()>(cap);
            let h = goro::spawn(move || {
                for i in 0..50u32 {
                    tx.send(Box::new([i as u8; 8192])).unwrap();
                    btx.send([i; 1024]).unwrap();
                    ztx.send(()).unwrap();
                }
            });
            for i in 0..50u32 {
                let b = rx.recv().unwrap();
                assert!(b.iter().all(|&x| x == i as u8));
                let a = brx.recv().unwrap();
                assert!(a.iter().all(|&x| x == i));
                zrx.recv().unwrap();
            }
            h.join().unwrap();
            assert_eq!(zrx.recv(), Err(RecvError));
        }
    });
}

/// Many producers and consumers through an unbuffered channel, sums match
/// (each value delivered exactly once).
#[test]
fn mpmc_sum_unbuffered_and_buffered() {
    let _w = common::watchdog();
    run(|| {
        let per = scale(5_000);
        for cap in [0usize, 1, 7, 128] {
            let (tx, rx) = chan::<u64>(cap);
            let total = Arc::new(AtomicUsize::new(0));
            let producers: Vec<_> = (0..8u64)
                .map(|p| {
                    let tx = tx.clone();
                    goro::spawn(move || {
                        for i in 0..per as u64 {
                            tx.send(p * 1_000_000 + i).unwrap();
                        }
                    })
                })
                .collect();
            drop(tx);
            let consumers: Vec<_> = (0..8)
                .map(|_| {
                    let rx = rx.clone();
                    let total = total.clone();
                    goro::spawn(move || {
                        let mut sum = 0u64;
                        for v in rx.iter() {
                            sum += v;
                            total.fetch_add(1, SeqCst);
                        }
                        sum
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
            let sum: u64 = consumers.into_iter().map(|h| h.join().unwrap()).sum();
            let per64 = per as u64;
            let expect: u64 = (0..8u64)
                .map(|p| p * 1_000_000 * per64 + per64 * (per64 - 1) / 2)
                .sum();
            assert_eq!(total.load(SeqCst), 8 * per, "chan[{cap}]");
            assert_eq!(sum, expect, "chan[{cap}]");
        }
    });
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

/// Busy-waits for `d`: only shifts the sender towards the receiver's
/// deadline so that completion and timeout race; no outcome depends on it.
fn spin_for(d: Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Timeouts racing completions: on an unbuffered channel a receiver's
/// `recv_timeout(d)` and a sender's `send_timeout(v, d)` started up to 2d
/// apart either meet (both Ok, the value delivered once) or both time out
/// (the sender gets its value back). Thousands of rounds put the rendezvous
/// at the deadline, where the timer and the peer race for the parked G:
/// a lost value, a double delivery or a mismatch fails the test, a lost
/// wake-up hangs it (watchdog). Sides on goroutines and on plain threads.
fn timeout_races(recv_thread: bool, send_thread: bool) {
    let rounds = scale(3000);
    let d = Duration::from_micros(200);
    for i in 0..rounds {
        let (tx, rx) = chan::<usize>(0);
        // Kept until both sides are done: the sender's drop must not close
        // the channel under a receiver still waiting.
        let _keep = tx.clone();
        let rx2 = rx.clone();
        let r = start_on(recv_thread, move || rx2.recv_timeout(d));
        // Most rounds arrive around the deadline (where the timer fires,
        // late by the timer slack), a quarter anywhere in 0..2d.
        let jitter = Duration::from_micros(if i % 4 == 0 {
            ((i * 37) % 400) as u64
        } else {
            150 + ((i * 13) % 200) as u64
        });
        let s = start_on(send_thread, move || {
            spin_for(jitter);
            tx.send_timeout(i, d)
        });
        let (got, sent) = (r(), s());
        match (got, sent) {
            (Ok(v), Ok(())) => {
                assert_eq!(v, i, "round {i}: wrong value");
            }
            (Err(goro::RecvTimeoutError::Timeout), Err(goro::SendTimeoutError::Timeout(v))) => {
                assert_eq!(v, i, "round {i}: the sender got another value back");
            }
            (got, sent) => panic!(
                "round {i}: inconsistent outcome: recv {got:?}, send ok = {}",
                sent.is_ok()
            ),
        }
        assert!(rx.try_recv().is_err(), "round {i}: a value was left behind");
    }
}

#[test]
fn timeout_races_completion_goroutines() {
    let _w = common::watchdog();
    run(|| timeout_races(false, false));
}

#[test]
fn timeout_races_completion_threads() {
    let _w = common::watchdog();
    timeout_races(true, true);
}

#[test]
fn timeout_races_completion_mixed() {
    let _w = common::watchdog();
    run(|| {
        timeout_races(true, false);
        timeout_races(false, true);
    });
}

/// A buffered value whose destructor panics does not leak the others: the
/// channel drops the rest while the panic unwinds, as a Vec does, whichever
/// side is dropped last and wherever the panicking value sits in the ring.
#[test]
fn panicking_drop_of_a_buffered_value_drops_the_rest() {
    let _w = common::watchdog();
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    type D = common::CountedDrop;
    fn d(panics: bool) -> D {
        D {
            drops: &DROPS,
            panics,
        }
    }
    run(|| {
        for receiver_last in [false, true] {
            for bad in 0..3 {
                DROPS.store(0, SeqCst);
                let (tx, rx) = chan::<D>(4);
                // Wrap the ring: recvx starts at 2.
                for _ in 0..2 {
                    tx.send(d(false)).unwrap();
                    drop(rx.recv().unwrap());
                }
                for i in 0..3 {
                    tx.send(d(i == bad)).unwrap();
                }
                DROPS.store(0, SeqCst);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    if receiver_last {
                        drop(tx);
                        drop(rx);
                    } else {
                        drop(rx);
                        drop(tx);
                    }
                }));
                assert!(r.is_err(), "the destructor's panic was swallowed");
                assert_eq!(
                    DROPS.load(SeqCst),
                    3,
                    "receiver_last {receiver_last}, bad {bad}"
                );
            }
        }
    });
}

// ---------------------------------------------------------------------------
// TestChanSendBarrier / TestChanSendSelectBarrier (runtime/chanbarrier_test.go).

/// Go's `async` response, handed over by pointer (here a Box) and checked
/// on arrival: a corrupted or misdelivered value shows.
struct Response {
    tag: u64,
    err: String,
}

/// Go's doRequest: a fresh goroutine hands a heap-allocated response to the
/// requester over an unbuffered channel (from a plain send, or from a
/// select whose other case, `done`, is never ready); the requester then
/// yields. The sender goroutine is not joined, as in Go.
fn do_request(use_select: bool, tag: u64) -> Box<Response> {
    let (ch_tx, ch_rx) = chan::<Box<Response>>(0);
    let (done_tx, done_rx) = chan::<()>(0);
    let resp = Box::new(Response {
        tag,
        err: format!("my error {tag}"),
    });
    if use_select {
        goro::spawn(move || {
            goro::select! {
                send(ch_tx, resp) -> r => r.unwrap_or_else(|_| panic!("response {tag} not taken")),
                recv(done_rx) -> _ => panic!("done is never ready"),
            }
        });
    } else {
        goro::spawn(move || {
            ch_tx
                .send(resp)
                .unwrap_or_else(|_| panic!("response {tag} not taken"))
        });
    }
    let r = ch_rx.recv().unwrap();
    goro::yield_now();
    drop(done_tx); // only now may the select see `done` closed
    r
}

/// Go's testChanSendBarrier: 100 goroutines each make `inner` requests,
/// allocating between them; every response arrives intact.
fn chan_send_barrier_test(use_select: bool) {
    run(move || {
        let outer = 100u64;
        let inner = scale(5000) as u64;
        let hs: Vec<_> = (0..outer)
            .map(|i| {
                goro::spawn(move || {
                    let mut garbage = Vec::new();
                    for j in 0..inner {
                        let tag = i * 1_000_000 + j;
                        let r = do_request(use_select, tag);
                        assert_eq!(r.tag, tag, "a response reached the wrong requester");
                        assert_eq!(r.err, format!("my error {tag}"));
                        garbage = vec![j as u8; 1 << 10];
                    }
                    garbage.len()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), 1 << 10);
        }
    })
}

/// TestChanSendBarrier: plain sends from short-lived goroutines (5000
/// requests per goroutine, a tenth under qemu; Go: 100,000, 1000 in short
/// mode). Go's test is about GC write barriers; here it checks delivery.
#[test]
fn chan_send_barrier() {
    let _w = common::watchdog();
    chan_send_barrier_test(false);
}

/// TestChanSendSelectBarrier: the same with the response sent from a
/// select.
#[test]
fn chan_send_select_barrier() {
    let _w = common::watchdog();
    chan_send_barrier_test(true);
}

// ---------------------------------------------------------------------------
// Stack shrinking under parked channel operations (runtime/shrink.rs:
// sysmon releases the dead part of a parked goroutine's stack).

/// Stacks the shrinker has released so far (process-wide, only grows).
fn shrinks() -> u64 {
    goro::__private::stack_shrinks().0
}

/// TestShrinkStackDuringBlockedSend, with goro's shrinker for Go's GC:
/// the sender recurses ~64 KiB deep between sends and then parks in a
/// rendezvous send with its 512-byte value on its stack; the receiver
/// waits until it is parked and a stack has been shrunk since (the counter
/// is process-wide: usually, not provably, the sender's), then takes the
/// value, which must be intact.
#[test]
fn shrink_stack_during_blocked_send() {
    let _w = common::watchdog();
    let _s = aggressive_shrink();
    run(|| {
        const N: usize = 10;
        let (tx, rx) = chan::<[u64; 64]>(0);
        let h = goro::spawn(move || {
            for i in 0..N {
                tx.send([i as u64; 64]).unwrap();
                // Use lots of stack, briefly.
                stack_growth_recursive(64);
            }
        });
        let start = shrinks();
        for i in 0..N {
            let s0 = shrinks();
            common::wait_parked(h.id());
            if i > 0 {
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                // Polling the shrinker's counter (it works on its own clock).
                while shrinks() == s0 && std::time::Instant::now() < deadline {
                    goro::time::sleep(Duration::from_millis(1));
                }
            }
            let x = rx.recv().unwrap();
            assert!(
                x.iter().all(|&v| v == i as u64),
                "bad channel read {i}: {x:?}"
            );
        }
        h.join().unwrap();
        assert!(shrinks() > start, "the shrinker never released a stack");
    });
}

/// TestNoShrinkStackWhileParking: pairs of goroutines, the sender
/// recursing deep after each send, the receiver pausing 10 µs before each
/// receive (Go's, so that the sender fully parks), while the shrinker
/// scans parked stacks back to back: parking races the shrinker. Values
/// arrive intact; a stack released under a running goroutine crashes it or
/// corrupts a value. 200 rounds of 10 sends (20 under qemu), as Go.
#[test]
fn no_shrink_stack_while_parking() {
    let _w = common::watchdog();
    let _s = aggressive_shrink();
    run(|| {
        const N: u64 = 10;
        let start = shrinks();
        for _ in 0..scale(200) {
            let (tx, rx) = chan::<[u64; 16]>(0);
            let r = goro::spawn(move || {
                for i in 0..N {
                    goro::time::sleep(Duration::from_micros(10));
                    let x = rx.recv().unwrap();
                    assert!(x.iter().all(|&v| v == i), "bad channel read {i}: {x:?}");
                }
            });
            let s = goro::spawn(move || {
                for i in 0..N {
                    tx.send([i; 16]).unwrap();
                    stack_growth_recursive(20);
                }
            });
            r.join().unwrap();
            s.join().unwrap();
        }
        // Not asserted: in 200 short rounds the shrinker may not have come
        // round (the test is then only a channel test).
        let _ = shrinks() - start;
    });
}
