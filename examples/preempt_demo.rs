//! A CPU loop beside a ticker on one P: the ticker keeps ticking because
//! sysmon preempts the loop (SIGURG). Prints the worst lateness.
//!
//!     cargo run --release --example preempt_demo
use std::time::{Duration, Instant};

fn main() {
    let cfg = goro::Config::from_env().max_procs(1);
    goro::run_with(cfg, || {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let hog = goro::go!(move || {
            let mut x = 1u64;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        });
        let mut worst = Duration::ZERO;
        for _ in 0..50 {
            let t = Instant::now();
            goro::time::sleep(Duration::from_millis(10));
            let late = t.elapsed().saturating_sub(Duration::from_millis(10));
            worst = worst.max(late);
            if std::env::var("V").is_ok() {
                eprint!("{:.1} ", late.as_secs_f64() * 1e3);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        hog.join().unwrap();
        let st = goro::stats();
        println!(
            "worst lateness {:.2} ms; preemptions {} (async {}), signals {}, refused {}, threads {}",
            worst.as_secs_f64() * 1e3,
            st.preemptions,
            st.preemptions_async,
            st.preempt_signals,
            st.preempt_refused,
            st.threads
        );
    });
}
