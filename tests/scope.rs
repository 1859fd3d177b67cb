//! `goro::scope`: scoped goroutines that borrow from their spawner
//! (std's thread::scope tests, adapted: std/src/thread/tests.rs
//! test_scoped_threads_borrow / _nll / _mut / _panic), plus what
//! goroutines add: parking inside the scope, waiting from a plain thread,
//! and the scope's wait when nobody joins.
//!
//! No test sleeps to order events: goroutines that must still be running
//! when the scope ends wait on a channel the test closes, or on a
//! counter; every check is on values, not time.

mod common;
use common::{run, scale};

use goro::chan;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

/// h13's shape: one goroutine per row block writes its rows straight into
/// the caller's matrix (Go's `out[i] = ...` into a shared slice).
#[test]
fn goroutines_write_into_borrowed_rows() {
    let _w = common::watchdog();
    run(|| {
        let n = 64;
        let a: Vec<u64> = (0..n * n).map(|i| i as u64 % 7).collect();
        let mut out = vec![0u64; n * n];
        goro::scope(|s| {
            for (bi, block) in out.chunks_mut(8 * n).enumerate() {
                let a = &a;
                s.spawn(move || {
                    for (r, row) in block.chunks_mut(n).enumerate() {
                        let i = bi * 8 + r;
                        for (j, v) in row.iter_mut().enumerate() {
                            *v = (0..n).map(|k| a[i * n + k] * a[k * n + j]).sum();
                        }
                        goro::yield_now();
                    }
                });
            }
        });
        for i in 0..n {
            for j in 0..n {
                let want: u64 = (0..n).map(|k| a[i * n + k] * a[k * n + j]).sum();
                assert_eq!(out[i * n + j], want, "out[{i}][{j}]");
            }
        }
    });
}

/// The scope waits for goroutines nobody joins, parked at its end: they
/// are blocked on a channel that the scope's closure closes only as its
/// last act, so each finishes after the closure returned.
#[test]
fn scope_waits_for_unjoined_parked_goroutines() {
    let _w = common::watchdog();
    run(|| {
        let n = scale(200);
        let finished = AtomicUsize::new(0);
        let (tx, rx) = chan::<()>(0);
        goro::scope(|s| {
            for _ in 0..n {
                let rx = rx.clone();
                let finished = &finished;
                s.spawn(move || {
                    assert!(rx.recv().is_err(), "only the close wakes us");
                    finished.fetch_add(1, SeqCst);
                });
            }
            tx.close();
        });
        assert_eq!(
            finished.load(SeqCst),
            n,
            "scope returned before its goroutines"
        );
    });
}

/// Results borrow from the environment and come back through `join`.
#[test]
fn join_returns_borrowing_results() {
    let _w = common::watchdog();
    run(|| {
        let words = [
            String::from("beta"),
            String::from("alphabet"),
            String::from("gamma"),
        ];
        let longest = goro::scope(|s| {
            let hs: Vec<_> = words
                .iter()
                .map(|w| s.spawn(move || (w.as_str(), w.len())))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .max_by_key(|&(_, l)| l)
                .unwrap()
                .0
        });
        assert_eq!(longest, "alphabet");
    });
}

/// Results of goroutines whose handles were dropped are dropped before the
/// scope returns (they may borrow from the environment).
#[test]
fn unjoined_results_are_dropped_inside_the_scope() {
    struct CountDrop<'a>(&'a AtomicUsize);
    impl Drop for CountDrop<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let _w = common::watchdog();
    run(|| {
        let drops = AtomicUsize::new(0);
        let n = 50;
        goro::scope(|s| {
            for _ in 0..n {
                let d = &drops;
                drop(s.spawn(move || CountDrop(d)));
            }
        });
        assert_eq!(drops.load(SeqCst), n);
    });
}

/// Scoped goroutines spawn more scoped goroutines through the shared
/// `&Scope`; all are waited for.
#[test]
fn nested_spawns_are_waited_for() {
    let _w = common::watchdog();
    run(|| {
        let count = AtomicUsize::new(0);
        goro::scope(|s| {
            for _ in 0..10 {
                s.spawn(|| {
                    for _ in 0..10 {
                        s.spawn(|| {
                            goro::yield_now();
                            count.fetch_add(1, SeqCst);
                        });
                    }
                });
            }
        });
        assert_eq!(count.load(SeqCst), 100);
    });
}

/// An unjoined goroutine's panic makes the scope panic, after every other
/// goroutine has finished; a joined one's panic is only in its result.
#[test]
fn unjoined_panic_panics_the_scope_after_the_wait() {
    let _w = common::watchdog();
    run(|| {
        let finished = AtomicUsize::new(0);
        let (tx, rx) = chan::<()>(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            goro::scope(|s| {
                s.spawn(|| panic!("scoped boom"));
                for _ in 0..10 {
                    let rx = rx.clone();
                    let finished = &finished;
                    s.spawn(move || {
                        let _ = rx.recv();
                        finished.fetch_add(1, SeqCst);
                    });
                }
                tx.close();
            })
        }));
        let msg = *r.expect_err("scope must panic").downcast::<&str>().unwrap();
        assert_eq!(msg, "a scoped goroutine panicked");
        assert_eq!(finished.load(SeqCst), 10);

        let joined = goro::scope(|s| {
            let h = s.spawn(|| -> u32 { panic!("joined boom") });
            h.join().is_err()
        });
        assert!(joined, "join must return the panic");
    });
}

/// Panics in its destructor (the result of an unjoined handle).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("result destructor panics (expected by the test)");
    }
}

/// The result of a handle dropped unjoined is dropped by its goroutine
/// inside the scope; a panic there is an unjoined panic: the scope panics.
/// h31: it unwound into the goroutine's epilogue and was lost, and the
/// scope returned normally.
#[test]
fn unjoined_result_panicking_on_drop_panics_the_scope() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<()>(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            goro::scope(|s| {
                // The result comes after the handle is gone, so the
                // goroutine drops it (not the handle).
                drop(s.spawn(move || {
                    let _ = rx.recv();
                    PanicsOnDrop
                }));
                tx.close();
            })
        }));
        let msg = *r.expect_err("scope must panic").downcast::<&str>().unwrap();
        assert_eq!(msg, "a scoped goroutine panicked");
    });
}

/// A panic in the scope's own closure is resumed only after the
/// goroutines it spawned have finished (they still borrow the frame the
/// unwinding would pop).
#[test]
fn closure_panic_waits_then_resumes() {
    let _w = common::watchdog();
    run(|| {
        let (tx, rx) = chan::<()>(0);
        let done = AtomicBool::new(false);
        let r = catch_unwind(AssertUnwindSafe(|| {
            goro::scope(|s| {
                let done = &done;
                s.spawn(move || {
                    // The closure below panics first; this goroutine is
                    // still parked then, and finishes only when the
                    // spawner's helper closes the channel.
                    let _ = rx.recv();
                    done.store(true, SeqCst);
                });
                // Close from another goroutine that the test does not wait
                // for, after the closure has started unwinding.
                goro::spawn(move || tx.close());
                panic!("closure boom");
            })
        }));
        let msg = *r
            .expect_err("scope must resume")
            .downcast::<&str>()
            .unwrap();
        assert_eq!(msg, "closure boom");
        assert!(
            done.load(SeqCst),
            "scope unwound before its goroutine finished"
        );
    });
}

/// From a plain OS thread (no goroutine): the scope blocks the thread
/// until its goroutines finish.
#[test]
fn scope_from_a_plain_thread() {
    let _w = common::watchdog();
    let mut v = vec![1u32; 1000];
    goro::scope(|s| {
        for chunk in v.chunks_mut(100) {
            s.spawn(move || {
                for x in chunk.iter_mut() {
                    *x *= 3;
                }
            });
        }
    });
    assert!(v.iter().all(|&x| x == 3));
}

/// Builder::spawn_scoped: names and stack sizes apply; an impossible size
/// is an error and the scope does not wait for the goroutine that was not
/// spawned.
#[test]
fn builder_spawn_scoped() {
    let _w = common::watchdog();
    run(|| {
        let local = 41u64;
        let r = goro::scope(|s| {
            let h = goro::Builder::new()
                .name("scoped")
                .stack_size(1 << 20)
                .spawn_scoped(s, || local + 1)
                .unwrap();
            let bad = goro::Builder::new()
                .stack_size(usize::MAX)
                .spawn_scoped(s, || local);
            assert_eq!(bad.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
            h.join().unwrap()
        });
        assert_eq!(r, 42);
    });
}

goro::goroutine_local! {
    /// A scoped goroutine's per-goroutine buffer, flushed when it drops.
    static FLUSH_ON_EXIT: std::cell::RefCell<Option<FlushOnDrop>> =
        const { std::cell::RefCell::new(None) };
}

/// A goroutine-local value that "flushes" into a shared counter when its
/// goroutine exits, after waiting until the scope's caller is parked (so
/// the flush happens while the caller is still inside `scope`, if `scope`
/// waits for it at all).
struct FlushOnDrop {
    caller: u64,
    flushed: std::sync::Arc<AtomicUsize>,
}

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        common::wait_parked(self.caller);
        self.flushed.fetch_add(1, SeqCst);
    }
}

/// `scope` returns only after its goroutines have finished, and a
/// goroutine's locals die with it (as `join` sees them dropped): a
/// per-goroutine value flushed by its destructor is flushed when `scope`
/// returns. h43: the scoped goroutine marked itself done before its
/// goroutine-locals were dropped (in the epilogue after the scoped box),
/// so `scope` returned while the destructors had not run (here: were
/// still waiting for the caller to park, which it never did again).
#[test]
fn scope_waits_for_goroutine_local_destructors() {
    let _w = common::watchdog();
    run(|| {
        let caller = goro::current_id().unwrap();
        let flushed = std::sync::Arc::new(AtomicUsize::new(0));
        let n = 4;
        goro::scope(|s| {
            for _ in 0..n {
                let flushed = flushed.clone();
                s.spawn(move || {
                    FLUSH_ON_EXIT.set(Some(FlushOnDrop { caller, flushed }));
                });
            }
        });
        assert_eq!(
            flushed.load(SeqCst),
            n,
            "scope returned before its goroutines' locals were dropped"
        );
    });
}

/// A panic in a scoped goroutine's goroutine-local destructor is that
/// goroutine's panic: its `join` returns `Err`, and unjoined it makes the
/// scope panic. h43: it was caught and discarded (join returned `Ok`, the
/// scope returned normally).
#[test]
fn local_destructor_panic_is_the_scoped_goroutines() {
    let _w = common::watchdog();
    run(|| {
        let r = goro::scope(|s| {
            s.spawn(|| common::FAILS_ON_EXIT.set(Some(common::LocalPanicsOnDrop)))
                .join()
        });
        let payload = r.expect_err("join returned Ok although a destructor panicked");
        assert_eq!(
            *payload.downcast::<&str>().unwrap(),
            "goroutine-local destructor panics (expected by the test)"
        );
        let r = catch_unwind(AssertUnwindSafe(|| {
            goro::scope(|s| {
                s.spawn(|| common::FAILS_ON_EXIT.set(Some(common::LocalPanicsOnDrop)));
            })
        }));
        let msg = *r.expect_err("scope must panic").downcast::<&str>().unwrap();
        assert_eq!(msg, "a scoped goroutine panicked");
    });
}
