//! Shared helpers: result type, RSS reading, workload constants.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
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
        Out {
            value: d.as_nanos() as f64 / ops.max(1) as f64,
            extra: Vec::new(),
        }
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
            let kb: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            return kb * 1024;
        }
    }
    0
}

/// Result for an rss run.
pub fn rss_out(before: u64, after: u64, n: u64) -> Res {
    let per = after.saturating_sub(before) as f64 / n.max(1) as f64;
    Ok(Out {
        value: per,
        extra: Vec::new(),
    }
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
    // SAFETY: cpu_set_t is plain data, zeroed is a valid empty set; the
    // libc calls only read/write that local set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        for c in 0..procs.min(ncpu).max(1) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

// ---------------------------------------------------------------------------
// Sync workloads (Go's sync benchmarks, b.RunParallel shape).

/// One sync workload: Go's benchmark, its worker count and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncShape {
    /// Workers = parallelism * PROCS (Go's b.SetParallelism; default 1).
    pub parallelism: usize,
    /// What each iteration does.
    pub op: SyncOp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncOp {
    /// BenchmarkMutexUncontended: each worker locks/unlocks its own mutex.
    MutexOwn,
    /// benchmarkMutex: all workers lock/unlock one mutex; `work`: then 100
    /// rounds of `foo *= 2; foo /= 2` outside the lock.
    MutexShared { work: bool },
    /// BenchmarkWaitGroupUncontended: own group; add(1), done(), wait().
    WgOwn,
    /// BenchmarkWaitGroupAddDone: one shared group; add(1), done().
    WgAddDone,
}

/// The sync workloads and their shapes (None: not a sync workload).
pub fn sync_shape(workload: &str) -> Option<SyncShape> {
    let (parallelism, op) = match workload {
        "mutex_uncontended" => (1, SyncOp::MutexOwn),
        "mutex" => (1, SyncOp::MutexShared { work: false }),
        "mutex_slack" => (10, SyncOp::MutexShared { work: false }),
        "mutex_work" => (1, SyncOp::MutexShared { work: true }),
        "wg_uncontended" => (1, SyncOp::WgOwn),
        "wg_adddone" => (1, SyncOp::WgAddDone),
        _ => return None,
    };
    Some(SyncShape { parallelism, op })
}

/// Iterations a worker claims at a time from the shared budget (Go's
/// RunParallel grain: ~100 µs of work, at most 10^4; fixed here, the same
/// in benches/go/main.go).
pub const GRAIN: i64 = 1000;

/// Go's testing.PB: hands out iterations from a budget shared by all
/// workers, GRAIN at a time.
pub struct Pb {
    budget: Arc<AtomicI64>,
    cache: i64,
}

impl Pb {
    pub fn new(budget: &Arc<AtomicI64>) -> Pb {
        Pb {
            budget: budget.clone(),
            cache: 0,
        }
    }

    /// Go's pb.Next.
    // The name mirrors Go's testing.PB; an Iterator would need an Item.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> bool {
        if self.cache == 0 {
            let left = self.budget.fetch_sub(GRAIN, Ordering::Relaxed);
            if left <= 0 {
                return false;
            }
            self.cache = left.min(GRAIN);
        }
        self.cache -= 1;
        true
    }
}

/// The "work" of benchmarkMutex(work=true): Go's source runs
/// `for i := 0; i < 100; i++ { foo *= 2; foo /= 2 }`, but `foo` is dead and
/// Go 1.19 compiles the arithmetic away, leaving an empty 100-iteration
/// counted loop (INCQ/CMPQ/JL). This runs the same empty loop; the empty asm
/// on the counter keeps LLVM from deleting or unrolling it.
#[inline]
pub fn local_work() {
    let mut i: u64 = 0;
    while i < 100 {
        // SAFETY: an empty asm block that only claims to read and write i.
        unsafe {
            std::arch::asm!("/* {0} */", inout(reg) i, options(nomem, nostack, preserves_flags))
        };
        i += 1;
    }
}

/// A lock exercised by the mutex workloads (`()` payload: Go's benchmarks
/// protect nothing).
pub trait Lock: Send + Sync + 'static {
    fn new() -> Self;
    /// Lock and immediately unlock.
    fn lock_unlock(&self);
}

impl Lock for std::sync::Mutex<()> {
    fn new() -> Self {
        std::sync::Mutex::new(())
    }
    #[inline]
    fn lock_unlock(&self) {
        drop(self.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

impl Lock for parking_lot::Mutex<()> {
    fn new() -> Self {
        parking_lot::Mutex::new(())
    }
    #[inline]
    fn lock_unlock(&self) {
        drop(self.lock());
    }
}

/// Result of a sync workload: ns/op = wall time / N (Go's RunParallel ns/op).
pub fn sync_out(d: Duration, n: u64, workers: usize) -> Res {
    Ok(Out::per_op(d, n).with("workers", workers))
}

// ---------------------------------------------------------------------------
// Network workloads (echo10k, idleconn): helpers shared by the goro rows.

/// A field of /proc/self/status in KiB (`VmRSS`, `VmPTE`, ...), 0 if absent.
pub fn vm_status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Context switches (voluntary and involuntary) of every thread of this
/// process so far, from /proc/self/task/*/status (the `idle` workload).
pub fn ctx_switches() -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        for l in s.lines() {
            if let Some(v) = l
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                n += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    n
}

/// The `idle` workload's shape: `n` tasks parked, the main task asleep
/// (the runtime's own sleep) for IDLE_SETTLE, then context switches of all
/// threads are counted over IDLE_WINDOW; value: switches per second.
pub const IDLE_SETTLE: Duration = Duration::from_millis(300);
pub const IDLE_WINDOW: Duration = Duration::from_secs(2);

/// The `idle` result from the switch counts around IDLE_WINDOW.
pub fn idle_out(before: u64, after: u64, n: u64) -> Res {
    let per_s = after.saturating_sub(before) as f64 / IDLE_WINDOW.as_secs_f64();
    Ok(Out {
        value: per_s,
        extra: Vec::new(),
    }
    .with("unit", "switches/s")
    .with("parked", n))
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit (`ulimit -n $(ulimit
/// -Hn)`; Go 1.19 does the same at startup); returns the new soft limit.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid, writable rlimit for getrlimit to fill in.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    r.rlim_cur = r.rlim_max;
    // SAFETY: r is a valid rlimit; raising the soft limit to the hard one
    // needs no privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    r.rlim_cur
}

/// Number of connections of the network workloads: `NET_CONNS`, default
/// 10,000 (the same variable is read by benches/go/main.go).
pub fn net_conns() -> usize {
    std::env::var("NET_CONNS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(10_000)
}

/// Set in the client child of a network workload: the server's address.
pub const NET_CLIENT_ENV: &str = "PEERS_NET_CLIENT";

/// Re-listens on `fd` with the system's maximum backlog (somaxconn), as Go
/// and goro::net listen; std (and so may) listens with 128, tokio with
/// 1024, which the echo10k client's 512 concurrent connects can overflow.
/// Linux updates the backlog of a listening socket on a second listen.
pub fn listen_max(fd: std::os::fd::RawFd) {
    let max = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .unwrap_or(4096);
    // SAFETY: listen(2) on a descriptor the caller owns and keeps open.
    unsafe { libc::listen(fd, max) };
}

/// This binary as the client child of network workload `name` for
/// implementation `imp` against `addr` (stdin piped, stderr inherited).
pub fn net_client_cmd(
    name: &str,
    imp: &str,
    addr: std::net::SocketAddr,
    n: u64,
    procs: usize,
) -> std::process::Command {
    use std::process::Stdio;
    let mut c = std::process::Command::new(std::env::current_exe().expect("current_exe"));
    c.args([name, imp, &n.to_string(), &procs.to_string()])
        .env(NET_CLIENT_ENV, addr.to_string())
        .stdin(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

/// The echo10k client's report on stdout: `CLIENT <round trips/s> k=v ...`
/// (or `CLIENT-ERROR` if `bad` echoes differed), read by the server.
pub fn print_client_line(bad: u64, conns: usize, k: u64, d: Duration, connect_s: f64) -> Res {
    if bad != 0 {
        println!("CLIENT-ERROR {bad} echoes differed");
        return Err("echo mismatch".into());
    }
    let trips = conns as u64 * k;
    println!(
        "CLIENT {:.0} unit=round_trips/s conns={conns} k={k} secs={:.3} connect_secs={connect_s:.3}",
        trips as f64 / d.as_secs_f64(),
        d.as_secs_f64(),
    );
    Ok(Out {
        value: 0.0,
        extra: Vec::new(),
    })
}

/// The value of a finished client child: its `CLIENT` line as an `Out`.
pub fn parse_client_output(out: &std::process::Output) -> Res {
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find(|l| l.starts_with("CLIENT ")) else {
        return Err(format!("client failed ({}): {}", out.status, text.trim()));
    };
    parse_client_line(line)
}

/// `CLIENT <value> k=v ...` from a client child into an `Out`.
fn parse_client_line(line: &str) -> Res {
    let mut it = line.split_whitespace().skip(1);
    let value: f64 = it
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("bad client line: {line}"))?;
    let mut out = Out {
        value,
        extra: Vec::new(),
    };
    for kv in it {
        if let Some((k, v)) = kv.split_once('=') {
            out = out.with(k, v);
        }
    }
    Ok(out)
}

/// The message of round trip `k` on connection `i` of `echo10k` (32
/// bytes; position- and connection-dependent so crossed streams show).
pub fn echo_msg(i: usize, k: u64) -> [u8; 32] {
    let mut m = [0u8; 32];
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k;
    for b in m.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    m
}
