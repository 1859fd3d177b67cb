//! goroutine_local! tests: one value per goroutine (also for goroutines
//! that ran on the same M, and for reused Gs), values dropped when the
//! goroutine exits (also by panic), recursive use from initialisers and
//! destructors, the Cell/RefCell helpers, declarations inside function
//! bodies, and the per-thread fallback on plain OS threads.

mod common;
use common::scale;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::ThreadId;

use goro::chan;

goro::goroutine_local! {
    /// A per-goroutine counter.
    static COUNTER: Cell<u64> = Cell::new(0);
    static NAME: RefCell<String> = RefCell::new(String::from("init"));
}

/// The OS thread (M) the caller runs on right now.
fn tid() -> ThreadId {
    std::thread::current().id()
}

/// A goroutine-local value is private to its goroutine, also when two
/// goroutines run one after the other on the same M: with one P, A sets its
/// value and parks, B runs on the same thread and must see the initial
/// value, and A's value survives B's writes.
#[test]
fn not_visible_from_another_goroutine_on_the_same_m() {
    let _w = common::watchdog();
    let prev = goro::set_max_procs(1);
    let mut same_m_seen = false;
    for _ in 0..20 {
        let same_m = common::run(|| {
            let (a_parked_tx, a_parked_rx) = chan::<ThreadId>(0);
            let (b_done_tx, b_done_rx) = chan::<ThreadId>(0);
            let a = goro::spawn(move || {
                COUNTER.set(41);
                NAME.set("a".into());
                a_parked_tx.send(tid()).unwrap();
                let b_tid = b_done_rx.recv().unwrap(); // park while B runs
                (b_tid, COUNTER.get(), NAME.with_borrow(|s| s.clone()))
            });
            let a_tid = a_parked_rx.recv().unwrap();
            let b = goro::spawn(move || {
                let seen = (COUNTER.get(), NAME.with_borrow(|s| s.clone()));
                COUNTER.set(7);
                NAME.set("b".into());
                b_done_tx.send(tid()).unwrap();
                seen
            });
            let b_seen = b.join().unwrap();
            let (b_tid, a_counter, a_name) = a.join().unwrap();
            assert_eq!(
                b_seen,
                (0, "init".to_string()),
                "B saw A's goroutine-local value"
            );
            assert_eq!(
                (a_counter, a_name.as_str()),
                (41, "a"),
                "A's value changed while B ran"
            );
            // The main goroutine's own value is untouched too.
            assert_eq!(COUNTER.get(), 0);
            a_tid == b_tid
        });
        if same_m {
            same_m_seen = true;
            break;
        }
    }
    goro::set_max_procs(prev);
    assert!(
        same_m_seen,
        "with one P, A and B never shared an M in 20 tries; the test proved nothing"
    );
}

/// Many goroutines at once, each incrementing its own counter across
/// switch points (and possibly thread migrations): none sees another's.
#[test]
fn private_under_concurrency_and_migration() {
    let _w = common::watchdog();
    goro::run(|| {
        let hs: Vec<_> = (0..64u64)
            .map(|i| {
                goro::spawn(move || {
                    COUNTER.set(i * 1000);
                    for k in 1..=scale(100) as u64 {
                        goro::yield_now();
                        COUNTER.set(COUNTER.get() + 1);
                        assert_eq!(COUNTER.get(), i * 1000 + k);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// Every goroutine starts from the initial value, also when it reuses the
/// G (and stack) of a goroutine that set the value and exited.
#[test]
fn each_goroutine_starts_from_init_also_reused_g() {
    let _w = common::watchdog();
    goro::run(|| {
        for i in 0..scale(2000) as u64 {
            let seen = goro::spawn(move || {
                let seen = (COUNTER.get(), NAME.with_borrow(|s| s.clone()));
                COUNTER.set(i + 1);
                NAME.with_borrow_mut(|s| s.push_str("-dirty"));
                seen
            })
            .join()
            .unwrap();
            assert_eq!(
                seen,
                (0, "init".to_string()),
                "goroutine {i} inherited a value"
            );
        }
    });
}

/// Sends its id on drop: observes when a goroutine-local value is dropped.
struct Probe {
    id: usize,
    drops: Arc<AtomicUsize>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(self.id, SeqCst);
    }
}

goro::goroutine_local! {
    static PROBE: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

/// Values are dropped when the goroutine returns, before join returns; a
/// goroutine that never touched the key creates and drops nothing.
#[test]
fn dropped_at_goroutine_exit() {
    let _w = common::watchdog();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    goro::run(move || {
        let d2 = d.clone();
        goro::spawn(move || PROBE.set(Some(Probe { id: 1, drops: d2 })))
            .join()
            .unwrap();
        assert_eq!(
            d.load(SeqCst),
            1,
            "value not dropped when the goroutine exited"
        );
        goro::spawn(|| ()).join().unwrap();
        assert_eq!(d.load(SeqCst), 1);
        // A parked goroutine keeps its value until it exits.
        let (tx, rx) = chan::<()>(0);
        let d3 = d.clone();
        let h = goro::spawn(move || {
            PROBE.set(Some(Probe { id: 10, drops: d3 }));
            rx.recv().unwrap();
        });
        for _ in 0..10 {
            goro::yield_now();
        }
        assert_eq!(d.load(SeqCst), 1, "value dropped while its goroutine lives");
        tx.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(d.load(SeqCst), 11);
    });
    assert_eq!(drops.load(SeqCst), 11);
}

/// A goroutine that panics still drops its values.
#[test]
fn dropped_when_goroutine_panics() {
    let _w = common::watchdog();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let r = goro::spawn(move || {
        PROBE.set(Some(Probe { id: 5, drops: d }));
        panic!("boom (expected by the test)");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(drops.load(SeqCst), 5);
}

goro::goroutine_local! {
    static OUTER: RefCell<Option<Probe>> = const { RefCell::new(None) };
    static INNER: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

/// Sets INNER from OUTER's destructor: the re-created table is dropped in a
/// second round, so both values are dropped and the G is left clean.
struct SetsInnerOnDrop {
    drops: Arc<AtomicUsize>,
}

impl Drop for SetsInnerOnDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(100, SeqCst);
        let d = self.drops.clone();
        INNER.set(Some(Probe { id: 1000, drops: d }));
    }
}

goro::goroutine_local! {
    static RESURRECT: RefCell<Option<SetsInnerOnDrop>> = const { RefCell::new(None) };
}

#[test]
fn destructor_using_goroutine_locals() {
    let _w = common::watchdog();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    goro::run(move || {
        let d2 = d.clone();
        goro::spawn(move || {
            OUTER.set(Some(Probe {
                id: 1,
                drops: d2.clone(),
            }));
            RESURRECT.set(Some(SetsInnerOnDrop { drops: d2 }));
        })
        .join()
        .unwrap();
        assert_eq!(d.load(SeqCst), 1101);
        // The next goroutines start clean.
        for _ in 0..10 {
            let clean = goro::spawn(|| {
                INNER.with_borrow(|v| v.is_none()) && OUTER.with_borrow(|v| v.is_none())
            })
            .join()
            .unwrap();
            assert!(
                clean,
                "a goroutine inherited a value re-created during destruction"
            );
        }
    });
}

goro::goroutine_local! {
    static DROPPED_BY: RefCell<Option<ReportsDropper>> = const { RefCell::new(None) };
}

/// Sends the id of the goroutine that drops it.
struct ReportsDropper(goro::Sender<Option<u64>>);

impl Drop for ReportsDropper {
    fn drop(&mut self) {
        let _ = self.0.send(goro::current_id());
    }
}

/// The result of a detached goroutine, which the goroutine itself drops
/// after its goroutine-locals: its destructor sets one.
struct SetsLocalOnDrop(goro::Sender<Option<u64>>);

impl Drop for SetsLocalOnDrop {
    fn drop(&mut self) {
        let tx = self.0.clone();
        DROPPED_BY.set(Some(ReportsDropper(tx)));
    }
}

/// A detached goroutine's result whose destructor sets a goroutine-local:
/// the value is dropped by that goroutine as it exits (h27: it stayed in
/// the G and the next goroutine to reuse the G started with it, and
/// dropped it).
#[test]
fn detached_result_destructor_using_goroutine_locals() {
    let _w = common::watchdog();
    common::run(|| {
        let (tx, rx) = chan::<Option<u64>>(1);
        let (gate_tx, gate_rx) = chan::<()>(0);
        let h = goro::spawn(move || {
            gate_rx.recv().unwrap();
            SetsLocalOnDrop(tx)
        });
        let id = h.id();
        drop(h); // detached: the goroutine drops its own result
        gate_tx.send(()).unwrap();
        // A hang detector, not a speed check: the drop comes at the exit.
        let dropper = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(dropper, Ok(Some(id)), "the value outlived its goroutine");
    });
}

goro::goroutine_local! {
    static SELF_TOUCHING: TouchesOwnKey = const { TouchesOwnKey };
}

/// Destructor runs of [`TouchesOwnKey`], and how many of its `with`s on its
/// own key panicked.
static OWN_KEY_DROPS: AtomicUsize = AtomicUsize::new(0);
static OWN_KEY_PANICS: AtomicUsize = AtomicUsize::new(0);

/// A value whose destructor uses its own key (a logger flushing into
/// itself, say). Gives up after 100 runs so that the old behaviour fails
/// the test instead of hanging it.
struct TouchesOwnKey;

impl Drop for TouchesOwnKey {
    fn drop(&mut self) {
        if OWN_KEY_DROPS.fetch_add(1, SeqCst) >= 100 {
            return;
        }
        let r = std::panic::catch_unwind(|| SELF_TOUCHING.with(|_| ()));
        if r.is_err() {
            OWN_KEY_PANICS.fetch_add(1, SeqCst);
        }
    }
}

/// A goroutine-local destructor that uses its own key gets a panic (std's
/// `AccessError` for a thread-local during its destruction), and the value
/// is dropped once. h31: it re-created the value, whose destructor
/// re-created it again, for ever: the goroutine never finished and its
/// join hung (51 million destructor runs in 3 s).
#[test]
fn destructor_using_its_own_key_panics_once() {
    let _w = common::watchdog();
    common::run(|| {
        goro::spawn(|| SELF_TOUCHING.with(|_| ())).join().unwrap();
        assert_eq!(
            OWN_KEY_DROPS.load(SeqCst),
            1,
            "the destructor re-created its own value"
        );
        assert_eq!(OWN_KEY_PANICS.load(SeqCst), 1);
        // The G is left clean: a goroutine on it starts without a value.
        goro::spawn(|| ()).join().unwrap();
        assert_eq!(OWN_KEY_DROPS.load(SeqCst), 1);
    });
}

/// An initialiser may use other goroutine-locals; a value is created once
/// per goroutine (lazily, on first use).
#[test]
fn lazy_init_once_per_goroutine() {
    let _w = common::watchdog();
    static INITS: AtomicUsize = AtomicUsize::new(0);
    goro::goroutine_local! {
        static BASE: u64 = 40;
        static DERIVED: u64 = {
            INITS.fetch_add(1, SeqCst);
            BASE.with(|b| *b) + 2
        };
    }
    goro::run(|| {
        let before = INITS.load(SeqCst);
        let hs: Vec<_> = (0..8)
            .map(|_| {
                goro::spawn(|| {
                    let a = DERIVED.with(|v| *v);
                    goro::yield_now();
                    let b = DERIVED.with(|v| *v);
                    (a, b)
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), (42, 42));
        }
        assert_eq!(
            INITS.load(SeqCst) - before,
            8,
            "one initialisation per goroutine"
        );
        goro::spawn(|| ()).join().unwrap();
        assert_eq!(INITS.load(SeqCst) - before, 8, "initialised without use");
    });
}

/// The Cell/RefCell helpers.
#[test]
fn cell_and_refcell_helpers() {
    let _w = common::watchdog();
    goro::run(|| {
        goro::spawn(|| {
            assert_eq!(COUNTER.get(), 0);
            COUNTER.set(3);
            assert_eq!(COUNTER.replace(4), 3);
            assert_eq!(COUNTER.take(), 4);
            assert_eq!(COUNTER.get(), 0);
            NAME.with_borrow_mut(|s| s.push('!'));
            assert_eq!(NAME.with_borrow(|s| s.clone()), "init!");
            assert_eq!(NAME.replace("x".into()), "init!");
            assert_eq!(NAME.take(), "x");
            assert_eq!(NAME.with_borrow(|s| s.len()), 0);
        })
        .join()
        .unwrap();
    });
}

/// On plain OS threads the key falls back to per-thread storage: each
/// thread starts from the initial value, and its value is dropped at
/// thread exit.
#[test]
fn plain_thread_fallback() {
    let _w = common::watchdog();
    let drops = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..4u64)
        .map(|i| {
            let d = drops.clone();
            std::thread::spawn(move || {
                assert_eq!(COUNTER.get(), 0, "thread inherited a value");
                COUNTER.set(i);
                std::thread::yield_now();
                assert_eq!(COUNTER.get(), i);
                PROBE.set(Some(Probe { id: 1, drops: d }));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        drops.load(SeqCst),
        4,
        "thread values not dropped at thread exit"
    );
    // A thread's value is not a goroutine's value.
    COUNTER.set(99);
    let in_g = goro::spawn(|| COUNTER.get()).join().unwrap();
    assert_eq!(in_g, 0);
    assert_eq!(COUNTER.get(), 99);
}

/// A value whose destructor panics (a per-goroutine resource whose
/// release check fails), and counts its drops.
struct PanicsOnDrop(Arc<AtomicUsize>);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        panic!("goroutine-local destructor panics (expected by the test)");
    }
}

goro::goroutine_local! {
    static FAILS_ON_EXIT: RefCell<Option<PanicsOnDrop>> = const { RefCell::new(None) };
    static ALSO_DROPPED: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

fn payload_str(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(|s| s.as_str()))
        .unwrap_or("<non-string payload>")
}

/// A panic in a goroutine-local destructor is a panic of the goroutine
/// (the values are dropped on its stack before `join` returns): `join`
/// returns `Err` with its payload, and the goroutine's other values are
/// still dropped. If the closure itself panicked, `join` reports that
/// panic. h43: the destructor's panic was caught and discarded, and
/// `join` returned `Ok` as if nothing had failed (std aborts the process
/// there).
#[test]
fn destructor_panic_fails_the_goroutine() {
    let _w = common::watchdog();
    common::run(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let probes = Arc::new(AtomicUsize::new(0));
        let (d, p) = (drops.clone(), probes.clone());
        let r = goro::spawn(move || {
            FAILS_ON_EXIT.set(Some(PanicsOnDrop(d)));
            ALSO_DROPPED.set(Some(Probe { id: 1, drops: p }));
            5
        })
        .join();
        assert_eq!(drops.load(SeqCst), 1);
        assert_eq!(probes.load(SeqCst), 1, "the other value was not dropped");
        let payload = r.expect_err("join returned Ok although a destructor panicked");
        assert_eq!(
            payload_str(&*payload),
            "goroutine-local destructor panics (expected by the test)"
        );

        // The closure's own panic wins over the destructor's.
        let d = drops.clone();
        let r = goro::spawn(move || {
            FAILS_ON_EXIT.set(Some(PanicsOnDrop(d)));
            panic!("closure panics (expected by the test)");
        })
        .join();
        assert_eq!(drops.load(SeqCst), 2);
        assert_eq!(
            payload_str(&*r.unwrap_err()),
            "closure panics (expected by the test)"
        );
    });
}

/// What [`TriesOwnKey`]'s destructor saw: its own key (destroyed), and a
/// key nobody had touched (created for it).
static TRY_WITH_SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A value whose destructor uses `try_with` on its own key and on a fresh
/// one: std's way for a thread-local destructor to use another key that
/// may already be gone, without panicking.
struct TriesOwnKey;

impl Drop for TriesOwnKey {
    fn drop(&mut self) {
        let own = TRIES_OWN_KEY.try_with(|_| ()).map_err(|e| e.to_string());
        let fresh = COUNTER.try_with(|c| c.get()).map_err(|e| e.to_string());
        TRY_WITH_SEEN
            .lock()
            .unwrap()
            .push(format!("{own:?} {fresh:?}"));
    }
}

goro::goroutine_local! {
    static TRIES_OWN_KEY: TriesOwnKey = const { TriesOwnKey };
}

/// `try_with` (std's `LocalKey::try_with`): `Err(AccessError)` instead of
/// a panic for a value already destroyed, otherwise `with`'s result; on a
/// plain thread it is std's. h43: goroutine_local! keys had no `try_with`,
/// so a destructor had no way to use a key that might be gone except to
/// catch `with`'s panic.
#[test]
fn try_with_reports_destroyed_values() {
    let _w = common::watchdog();
    common::run(|| {
        assert_eq!(COUNTER.try_with(|c| c.get() + 1), Ok(1));
        goro::spawn(|| TRIES_OWN_KEY.with(|_| ())).join().unwrap();
        let seen = TRY_WITH_SEEN.lock().unwrap().clone();
        assert_eq!(
            seen,
            ["Err(\"cannot access a goroutine-local during or after its destruction\") Ok(0)"]
        );
    });
    // A plain thread: std's thread-local fallback.
    std::thread::spawn(|| {
        COUNTER.set(5);
        assert_eq!(COUNTER.try_with(|c| c.get()), Ok(5));
    })
    .join()
    .unwrap();
}
