//! Execution trace (Go's runtime/trace), written as Chrome trace-event
//! JSON (loads in chrome://tracing and Perfetto).
//!
//! Layout of the file: one process, one track (`tid`) per P, named `P0`,
//! `P1`, ...; each stretch of a goroutine running on a P is a complete
//! event (`"ph":"X"`, name `G7`); instant events (`"ph":"i"`) on the same
//! tracks for `spawn` (args: new goroutine id), `park` (args: goroutine id,
//! Go's wait reason), `unpark` (args: goroutine id readied), `preempt`
//! (args: goroutine id, `coop` or `async`), `steal` (args: victim P) and,
//! on the retaken P's track, `syscall handoff`. Events from
//! threads without a P (a plain thread readying or spawning a goroutine) go
//! to a track `tid = -1` named `no P`. Timestamps are µs since `start`.
//!
//! Recording: each thread (M or plain) appends to its own buffer (a
//! `parking_lot::Mutex<Buf>` registered once per thread in `BUFS`; its lock
//! is only contended by `stop`), so threads never share a buffer. A slice
//! opens in `execute` and closes when the M next enters `schedule` or
//! executes another G; a goroutine that resumes without `schedule` (after a
//! syscall with a new P) stays in its slice, attributed to the P it started
//! on. When tracing is off every hook is one Relaxed load and a branch.

use crate::waitreason::WaitReason;
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use parking_lot::Mutex;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tracing on. Relaxed: hooks may miss or add a few events around
/// start/stop; each buffer's lock orders the events themselves.
static ON: AtomicBool = AtomicBool::new(false);
/// `nanotime()` at start.
static T0: AtomicI64 = AtomicI64::new(0);
/// The output path while tracing (start/stop serialise on it).
static OUT: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Every thread's buffer ever registered.
static BUFS: Mutex<Vec<Arc<Mutex<Buf>>>> = Mutex::new(Vec::new());

#[derive(Clone, Copy)]
enum Kind {
    Slice,
    Spawn,
    Park,
    Unpark,
    /// `goid` preempted cooperatively (at a runtime entry).
    PreemptCoop,
    /// `goid` preempted asynchronously (SIGURG).
    PreemptAsync,
    /// sysmon retook P `goid` (the P id) from a syscall and handed it off.
    SyscallHandoff,
    /// A G took work from P `goid` (the victim's id).
    Steal,
    /// Scheduler counters sampled by sysmon: `goid` runnable Gs (global
    /// and local queues), `dur` idle Ps.
    Counters,
    /// netpoll made `goid` goroutines runnable.
    Netpoll,
    /// The stack scavenger returned `goid` free stacks to the OS.
    Scavenge,
}

#[derive(Clone, Copy)]
struct Event {
    kind: Kind,
    ts: i64,
    dur: i64,
    p: i64,
    goid: u64,
    reason: WaitReason,
}

#[derive(Default)]
struct Buf {
    events: Vec<Event>,
    /// The slice this thread's M is running: (P, goid, start ns).
    open: Option<(i64, u64, i64)>,
}

thread_local! {
    static MINE: Arc<Mutex<Buf>> = {
        let b = Arc::new(Mutex::new(Buf::default()));
        BUFS.lock().push(b.clone());
        b
    };
}

/// Whether tracing is on (the hooks' fast check).
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Runs `f` on this thread's buffer. Not inlined: the thread-local's
/// address must not be cached across a goroutine switch (lib.rs docs).
/// Callers on a user G are inside an acquirem section (never preempted
/// while holding the buffer's lock); the others run on g0.
#[inline(never)]
fn with_buf(f: impl FnOnce(&mut Buf)) {
    let _ = MINE.try_with(|b| f(&mut b.lock()));
}

fn cur_p() -> i64 {
    let pp = crate::m::getp();
    if pp.is_null() {
        -1
    } else {
        // SAFETY: Ps are never freed; the id is immutable.
        unsafe { (*pp).id as i64 }
    }
}

fn close(b: &mut Buf, now: i64) {
    if let Some((p, goid, ts)) = b.open.take() {
        b.events.push(Event {
            kind: Kind::Slice,
            ts,
            dur: now - ts,
            p,
            goid,
            reason: WaitReason::Zero,
        });
    }
}

/// `execute` is about to run goroutine `goid` on P `p` (g0).
#[cold]
pub(crate) fn slice_begin(p: usize, goid: u64) {
    let now = crate::os::nanotime();
    with_buf(|b| {
        close(b, now);
        b.open = Some((p as i64, goid, now));
    });
}

/// The M entered `schedule`: its goroutine stopped running (g0).
#[cold]
pub(crate) fn slice_end() {
    let now = crate::os::nanotime();
    with_buf(|b| close(b, now));
}

fn instant(kind: Kind, goid: u64, reason: WaitReason) {
    record(kind, cur_p(), goid, 0, reason);
}

/// Appends an event stamped now to this thread's buffer.
fn record(kind: Kind, p: i64, goid: u64, dur: i64, reason: WaitReason) {
    let ev = Event {
        kind,
        ts: crate::os::nanotime(),
        dur,
        p,
        goid,
        reason,
    };
    with_buf(|b| b.events.push(ev));
}

/// A goroutine `goid` was created.
#[cold]
pub(crate) fn spawn(goid: u64) {
    instant(Kind::Spawn, goid, WaitReason::Zero);
}

/// The running goroutine `goid` parks with `reason`.
#[cold]
pub(crate) fn park(goid: u64, reason: WaitReason) {
    instant(Kind::Park, goid, reason);
}

/// Goroutine `goid` was readied.
#[cold]
pub(crate) fn unpark(goid: u64) {
    instant(Kind::Unpark, goid, WaitReason::Zero);
}

/// Goroutine `goid` was preempted, cooperatively or by SIGURG (`async_`).
/// On the G, inside a critical section.
#[cold]
pub(crate) fn preempt(goid: u64, async_: bool) {
    let k = if async_ {
        Kind::PreemptAsync
    } else {
        Kind::PreemptCoop
    };
    instant(k, goid, WaitReason::Zero);
}

/// sysmon handed P `p` off from a syscall (guarded or detected).
#[cold]
pub(crate) fn syscall_handoff(p: usize) {
    instant(Kind::SyscallHandoff, p as u64, WaitReason::Zero);
}

/// This M stole work from P `victim` (g0).
#[cold]
pub(crate) fn steal(victim: usize) {
    instant(Kind::Steal, victim as u64, WaitReason::Zero);
}

/// Scheduler counters (sysmon, at most once per millisecond while tracing):
/// `runnable` Gs in the global and local run queues, `idle_ps` idle Ps.
#[cold]
pub(crate) fn counters(runnable: usize, idle_ps: usize) {
    record(
        Kind::Counters,
        -1,
        runnable as u64,
        idle_ps as i64,
        WaitReason::Zero,
    );
}

/// netpoll found `n` goroutines ready (any thread).
#[cold]
pub(crate) fn netpoll(n: usize) {
    instant(Kind::Netpoll, n as u64, WaitReason::Zero);
}

/// The scavenger returned the pages of `n` free stacks (sysmon).
#[cold]
pub(crate) fn scavenge(n: usize) {
    instant(Kind::Scavenge, n as u64, WaitReason::Zero);
}

/// Starts recording an execution trace to `path` (created or truncated
/// now; written by [`stop`]). Go's `trace.Start`.
///
/// Errors: the file cannot be created, or a trace is already running
/// (`ErrorKind::AlreadyExists`, Go's "tracing is already enabled").
/// Starts the runtime if needed. Does not block.
pub fn start(path: impl AsRef<Path>) -> io::Result<()> {
    crate::ensure_started();
    start_inner(path.as_ref())
}

pub(crate) fn start_inner(path: &Path) -> io::Result<()> {
    // Critical section: the trace locks are also taken on g0 of this M.
    let _ml = crate::m::MLock::new();
    let mut out = OUT.lock();
    if out.is_some() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "goro::trace: tracing is already enabled",
        ));
    }
    std::fs::File::create(path)?;
    for b in BUFS.lock().iter() {
        let mut b = b.lock();
        b.events.clear();
        b.open = None;
    }
    T0.store(crate::os::nanotime(), Ordering::Relaxed);
    *out = Some(path.to_path_buf());
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// Stops tracing and writes the trace file (Chrome trace-event JSON, see
/// the module docs). Go's `trace.Stop`. Blocks while writing.
///
/// Errors: writing the file failed, or no trace is running
/// (`ErrorKind::NotFound`).
pub fn stop() -> io::Result<()> {
    // Critical section: the trace locks are also taken on g0 of this M.
    let _ml = crate::m::MLock::new();
    let mut out = OUT.lock();
    let Some(path) = out.take() else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "goro::trace: tracing is not enabled",
        ));
    };
    ON.store(false, Ordering::Relaxed);
    let now = crate::os::nanotime();
    let t0 = T0.load(Ordering::Relaxed);
    let mut events = Vec::new();
    for b in BUFS.lock().iter() {
        let mut b = b.lock();
        close(&mut b, now);
        events.append(&mut b.events);
    }
    events.sort_by_key(|e| e.ts);
    let us = |ns: i64| (ns - t0).max(0) as f64 / 1000.0;
    let mut ps: Vec<i64> = events.iter().map(|e| e.p).collect();
    ps.sort_unstable();
    ps.dedup();
    // Streamed event by event (a million-event trace as a serde_json
    // Value tree takes minutes); every string written is a fixed ASCII
    // literal or a number, so no escaping is needed, and serde_json still
    // writes the names.
    let mut f = io::BufWriter::new(std::fs::File::create(&path)?);
    f.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    let mut first = true;
    let mut sep = |f: &mut io::BufWriter<std::fs::File>| -> io::Result<()> {
        if !std::mem::take(&mut first) {
            f.write_all(b",\n")?;
        }
        Ok(())
    };
    for p in ps {
        let name = if p < 0 {
            "no P".to_string()
        } else {
            format!("P{p}")
        };
        sep(&mut f)?;
        write!(
            f,
            r#"{{"name":"thread_name","ph":"M","pid":1,"tid":{p},"args":{{"name":{}}}}}"#,
            serde_json::to_string(&name)?
        )?;
    }
    for e in &events {
        sep(&mut f)?;
        let (tid, ts) = (e.p, us(e.ts));
        match e.kind {
            Kind::Slice => write!(
                f,
                r#"{{"name":"G{g}","ph":"X","pid":1,"tid":{tid},"ts":{ts:.3},"dur":{d:.3},"args":{{"goid":{g}}}}}"#,
                g = e.goid,
                d = e.dur as f64 / 1000.0
            )?,
            Kind::Spawn => write!(
                f,
                r#"{{"name":"spawn","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"goid":{}}}}}"#,
                e.goid
            )?,
            Kind::Park => write!(
                f,
                r#"{{"name":"park","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"goid":{},"reason":{}}}}}"#,
                e.goid,
                serde_json::to_string(e.reason.as_str())?
            )?,
            Kind::Unpark => write!(
                f,
                r#"{{"name":"unpark","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"goid":{}}}}}"#,
                e.goid
            )?,
            Kind::PreemptCoop | Kind::PreemptAsync => write!(
                f,
                r#"{{"name":"preempt","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"goid":{},"kind":"{}"}}}}"#,
                e.goid,
                if matches!(e.kind, Kind::PreemptAsync) {
                    "async"
                } else {
                    "coop"
                }
            )?,
            Kind::SyscallHandoff => write!(
                f,
                r#"{{"name":"syscall handoff","ph":"i","s":"t","pid":1,"tid":{p},"ts":{ts:.3},"args":{{"p":{p}}}}}"#,
                p = e.goid
            )?,
            Kind::Steal => write!(
                f,
                r#"{{"name":"steal","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"victim":{}}}}}"#,
                e.goid
            )?,
            Kind::Counters => write!(
                f,
                r#"{{"name":"scheduler","ph":"C","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"runnable Gs":{},"idle Ps":{}}}}}"#,
                e.goid, e.dur
            )?,
            Kind::Netpoll => write!(
                f,
                r#"{{"name":"netpoll","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"ready":{}}}}}"#,
                e.goid
            )?,
            Kind::Scavenge => write!(
                f,
                r#"{{"name":"stack scavenge","ph":"i","s":"t","pid":1,"tid":{tid},"ts":{ts:.3},"args":{{"stacks":{}}}}}"#,
                e.goid
            )?,
        }
    }
    f.write_all(b"]}\n")?;
    f.flush()
}

/// `GORO_TRACE=path`: start tracing at runtime start and write the file at
/// process exit (atexit), or at an explicit [`stop`].
pub(crate) fn init_from_env() {
    let Some(path) = std::env::var_os("GORO_TRACE") else {
        return;
    };
    if path.is_empty() || start_inner(Path::new(&path)).is_err() {
        return;
    }
    extern "C" fn at_exit() {
        let _ = stop();
    }
    // SAFETY: registering a plain extern "C" fn; it runs at exit() on the
    // exiting thread.
    unsafe { libc::atexit(at_exit) };
}
