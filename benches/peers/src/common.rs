//! Shared helpers: result type, RSS reading, workload constants.

use std::time::Duration;

/// One workload invocation.
pub struct Work<'a> {
    pub name: &'a str,
    pub n: u64,
    pub procs: usize,
}

/// A measurement: `value` is ns/op (bytes per goroutine for `rss`), plus
/// optional `key=value` extras printed after it.
pub struct Out {
    pub value: f64,
    pub extra: Vec<(String, String)>,
}

pub type Res = Result<Out, String>;

impl Out {
    pub fn per_op(d: Duration, ops: u64) -> Out {
        Out { value: d.as_nanos() as f64 / ops.max(1) as f64, extra: Vec::new() }
    }
    pub fn with(mut self, k: &str, v: impl ToString) -> Out {
        self.extra.push((k.to_string(), v.to_string()));
        self
    }
}

/// Go's benchmarks batch work in units of CallsPerSched = 1000.
pub const CALLS_PER_SCHED: i64 = 1000;
/// benchmarks-game thread-ring size.
pub const RING: usize = 503;

/// Expected 1-based id of the ring member that sees token 0.
pub fn ring_winner(n: u64) -> usize {
    (n % RING as u64) as usize + 1
}

/// Result for a thread-ring run: ns per hop plus total ms and the winner id.
pub fn ring_out(d: Duration, n: u64, id: usize) -> Res {
    if id != ring_winner(n) {
        return Err(format!("wrong-winner id={id} expected={}", ring_winner(n)));
    }
    Ok(Out::per_op(d, n)
        .with("total_ms", format!("{:.1}", d.as_secs_f64() * 1e3))
        .with("id", id))
}

/// VmRSS of this process in bytes, from /proc/self/status.
pub fn vm_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            return kb * 1024;
        }
    }
    0
}

/// Result for an rss run.
pub fn rss_out(before: u64, after: u64, n: u64) -> Res {
    let per = after.saturating_sub(before) as f64 / n.max(1) as f64;
    Ok(Out { value: per, extra: Vec::new() }
        .with("unit", "bytes/goroutine")
        .with("rss_before_kb", before / 1024)
        .with("rss_after_kb", after / 1024))
}

pub fn not_applicable(what: &str) -> Res {
    Err(format!("not-applicable: {what}"))
}

/// Pin the process (all future threads) to the first `procs` CPUs; used for
/// the std-thread rows so "1 P" means one CPU.
pub fn pin_to_cpus(procs: usize) {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        for c in 0..procs.min(ncpu).max(1) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
