//! Asynchronous preemption inside the global allocator (its own binary:
//! the test installs a `#[global_allocator]`).
//!
//! A Rust global allocator is code of the executable, so a goroutine may be
//! preempted in the middle of an allocation, and in pinned mode the
//! scheduler then runs on g0 of the same thread while the interrupted call
//! is unfinished. An allocator with thread-local state (mimalloc's heap,
//! jemalloc's tcache, a counting wrapper) must not be re-entered there:
//! that thread's scheduler code must not allocate. This allocator wraps the
//! system one and counts, per thread, calls made while a call is already
//! in progress on the same thread.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

thread_local! {
    /// Allocator calls in progress on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}
/// Calls that found another call in progress on their thread.
/// Relaxed: a counter, read after the goroutines that add to it are joined.
static REENTERED: AtomicU64 = AtomicU64::new(0);
/// Spin inside each call, so that most preemptions land inside the
/// allocator. Relaxed: a switch with no data behind it.
static WIDEN: AtomicBool = AtomicBool::new(false);

struct Reentrancy;

// Not inlined: inlined into a goroutine's function that has a switch
// point (the test's loop around yield_now), LLVM would compute DEPTH's
// address once for the whole function, and the goroutine would count on
// the thread it left (docs/PREEMPTION.md: keep thread-local accesses in
// functions without switch points).
impl Reentrancy {
    #[inline(never)]
    fn enter(&self) {
        let d = DEPTH.with(|d| {
            let v = d.get();
            d.set(v + 1);
            v
        });
        if d != 0 {
            REENTERED.fetch_add(1, Relaxed);
        }
        if WIDEN.load(Relaxed) {
            for i in 0..2_000u32 {
                std::hint::black_box(i);
            }
        }
    }

    #[inline(never)]
    fn leave(&self) {
        DEPTH.with(|d| d.set(d.get().wrapping_sub(1)));
    }
}

// SAFETY: forwards every call to the system allocator unchanged; the
// bookkeeping around it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Reentrancy {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        self.enter();
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(l) };
        self.leave();
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        self.enter();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) };
        self.leave();
    }
}

#[global_allocator]
static ALLOC: Reentrancy = Reentrancy;

/// Hogs that allocate and free in a loop at GOMAXPROCS=1 with 100 µs slices
/// are preempted inside the allocator, each on its own pinned M; the Ms
/// behind them are created while those calls are unfinished; a trace
/// started meanwhile records their first events there. Before: the
/// preempted thread's g0 allocated the new M (`newm` on a pinned M) and
/// parking_lot's thread data (at its first contended runtime lock): 38-46
/// re-entries per run, 10 runs in 10; 2 runs in 20 with the first fixed.
/// Tracing allocated its thread buffers and chunks there too.
#[test]
fn scheduler_does_not_reenter_the_allocator_of_a_preempted_goroutine() {
    let _w = common::watchdog();
    let hogs = if common::qemu() { 4 } else { 16 };
    let cfg = goro::Config::from_env()
        .max_procs(1)
        .time_slice(Duration::from_micros(100));
    goro::run_with(cfg, move || {
        let start = goro::stats().preemptions_async;
        WIDEN.store(true, Relaxed);
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..hogs)
            .map(|_| {
                let done = done.clone();
                goro::spawn(move || {
                    let mut n = 0usize;
                    while !done.load(Relaxed) {
                        let v: Vec<u8> = Vec::with_capacity(64);
                        n += std::hint::black_box(v).capacity();
                    }
                    n
                })
            })
            .collect();
        // Tracing from the middle of the run: the first events of the
        // threads already running hogs (their buffers and chunks) are
        // recorded on the preemption's path.
        while goro::stats().preemptions_async - start < hogs as u64 {
            goro::yield_now();
        }
        let trace =
            std::env::temp_dir().join(format!("goro-preempt-alloc-{}.json", std::process::id()));
        goro::trace::start(&trace).unwrap();
        // Until every hog has been preempted onto a thread of its own (the
        // Ms are created meanwhile) and then some.
        loop {
            let s = goro::stats();
            if s.threads >= hogs && s.preemptions_async - start >= 4 * hogs as u64 {
                break;
            }
            goro::yield_now();
        }
        done.store(true, Relaxed);
        for h in hs {
            h.join().unwrap();
        }
        WIDEN.store(false, Relaxed);
        goro::trace::stop().unwrap();
        let _ = std::fs::remove_file(&trace);
        let s = goro::stats();
        assert!(s.preemptions_async - start >= 4 * hogs as u64);
        assert_eq!(
            REENTERED.load(Relaxed),
            0,
            "the allocator was re-entered on a thread whose goroutine was preempted inside it ({} asynchronous preemptions, {} threads)",
            s.preemptions_async - start,
            s.threads
        );
    });
}
