//! Side-by-side scheduler benchmarks: goro vs may, tokio, corosensei and std
//! threads (Go's numbers come from `benches/go/main.go`, same workloads).
//!
//! Usage: `peers <workload> <impl> [N] [PROCS]`
//!
//! Prints exactly one machine-parsable line on stdout:
//!   `RESULT <workload> <impl> <value> [key=value ...]`
//! where <value> is ns/op (bytes per goroutine for `rss`; round trips/s
//! for `echo10k`; KiB per connection for `idleconn`), or
//!   `RESULT <workload> <impl> n/a <reason...>`
//! when the implementation cannot run the workload.
//!
//! Workload shapes are documented in `benches/peers/README.md`.

mod common;
mod coro_impl;
#[cfg(feature = "goro")]
mod goro_impl;
#[cfg(feature = "goro")]
mod goro_net;
mod may_impl;
mod may_net;
mod std_impl;
mod tokio_impl;
mod tokio_net;

pub use common::*;

pub const WORKLOADS: &[&str] = &[
    "switch",
    "yield",
    "spawn",
    "spawn_wait",
    "chansync",
    "prodcons100",
    "threadring",
    "select2",
    "rss",
    "mutex_uncontended",
    "mutex",
    "mutex_slack",
    "mutex_work",
    "wg_uncontended",
    "wg_adddone",
    "syscall",
    "preempt",
    "blocking",
    "blocking_guarded",
    "preempt_overhead",
    "burst",
    "idle",
    "trace",
    "echo10k",
    "idleconn",
];
/// Workloads over goro::net (two processes each: server and client child).
pub const NET_WORKLOADS: &[&str] = &["echo10k", "idleconn"];
pub const IMPLS: &[&str] = &[
    "goro",
    "goro_std",
    "goro_pl",
    "may",
    "tokio",
    "corosensei",
    "std",
];

/// Default N per workload (compare.sh passes N explicitly).
fn default_n(workload: &str) -> u64 {
    match workload {
        "switch" => 10_000_000,
        "yield" => 2_000_000, // per goroutine; 2x yields in total
        "spawn" | "spawn_wait" => 1_000_000,
        "chansync" => 2_000_000,
        "prodcons100" => 5_000_000,
        "threadring" => 10_000_000,
        "select2" => 1_000_000,
        "rss" => 100_000,
        "mutex_uncontended" | "wg_uncontended" => 50_000_000,
        "mutex" | "mutex_slack" | "mutex_work" | "wg_adddone" => 10_000_000,
        "syscall" => 2_000_000,
        "preempt" => 50,
        "blocking" | "blocking_guarded" => 10,
        "preempt_overhead" => 2_000_000_000,
        "burst" => 50_000,
        "idle" => 100, // parked goroutines
        "trace" => 1_000_000,
        "echo10k" => 10,      // round trips per connection (NET_CONNS of them)
        "idleconn" => 10_000, // connections
        _ => 1_000_000,
    }
}

/// Default number of Ps / workers: 1 for the one-P workloads, 2 otherwise.
fn default_procs(workload: &str) -> usize {
    match workload {
        "switch" | "yield" | "syscall" | "preempt" | "blocking" | "blocking_guarded" => 1,
        _ => 2,
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: peers <workload> <impl> [N] [PROCS]\n  workloads: {}\n  impls: {}",
        WORKLOADS.join(" "),
        IMPLS.join(" ")
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        usage();
    }
    let workload = args[0].as_str();
    let imp = args[1].as_str();
    if !WORKLOADS.contains(&workload) || !IMPLS.contains(&imp) {
        usage();
    }
    let n: u64 = args
        .get(2)
        .map(|s| s.replace('_', "").parse().unwrap_or_else(|_| usage()))
        .unwrap_or_else(|| default_n(workload));
    let procs: usize = args
        .get(3)
        .map(|s| s.parse().unwrap_or_else(|_| usage()))
        .unwrap_or_else(|| default_procs(workload));
    let w = Work {
        name: workload,
        n,
        procs,
    };

    let res: Res = match imp {
        "goro" if NET_WORKLOADS.contains(&workload) => run_goro_net(&w),
        "tokio" if NET_WORKLOADS.contains(&workload) => tokio_net::run(&w),
        "may" if NET_WORKLOADS.contains(&workload) => may_net::run(&w),
        _ if NET_WORKLOADS.contains(&workload) => {
            not_applicable("the network workloads are measured for goro, Go, tokio and may")
        }
        "goro" => run_goro(&w),
        "goro_std" | "goro_pl" => run_goro_foreign(&w, imp),
        "may" => may_impl::run(&w),
        "tokio" => tokio_impl::run(&w),
        "corosensei" => coro_impl::run(&w),
        "std" => std_impl::run(&w),
        _ => unreachable!(),
    };
    match res {
        Ok(out) => {
            let mut line = format!("RESULT {workload} {imp} {:.2}", out.value);
            for (k, v) in &out.extra {
                line.push_str(&format!(" {k}={v}"));
            }
            println!("{line} n={n} procs={procs}");
        }
        Err(reason) => println!("RESULT {workload} {imp} n/a {reason}"),
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // Some workloads leave parked goroutines / threads behind (Go's programs
    // simply exit too): do not wait for runtimes to wind down.
    std::process::exit(0);
}

#[cfg(feature = "goro")]
fn run_goro(w: &Work) -> Res {
    goro_impl::run(w)
}

#[cfg(not(feature = "goro"))]
fn run_goro(_w: &Work) -> Res {
    Err("built-without-goro-feature".into())
}

#[cfg(feature = "goro")]
fn run_goro_net(w: &Work) -> Res {
    goro_net::run(w)
}

#[cfg(not(feature = "goro"))]
fn run_goro_net(_w: &Work) -> Res {
    Err("built-without-goro-feature".into())
}

#[cfg(feature = "goro")]
fn run_goro_foreign(w: &Work, imp: &str) -> Res {
    goro_impl::run_foreign_lock(w, imp)
}

#[cfg(not(feature = "goro"))]
fn run_goro_foreign(_w: &Work, _imp: &str) -> Res {
    Err("built-without-goro-feature".into())
}
