//! sysmon: the monitor thread that runs without a P (Go's sysmon).
//!
//! It sleeps 20 µs, doubling after 1 ms of idle cycles up to 10 ms, and on
//! each tick: asks a G that has run on one P for more than 10 ms to yield
//! (cooperative preemption flag, checked at runtime entries), prints
//! `GODEBUG=schedtrace` lines, and every 500 ms returns the cold pages of
//! free goroutine stacks to the OS (a small stand-in for Go's scavenger).

use crate::sched::{self, SCHED};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Go's forcePreemptNS: a G running this long on one P is asked to yield.
pub(crate) const FORCE_PREEMPT_NS: i64 = 10_000_000;

/// How often free goroutine stacks give their cold pages back (ns).
const SCAVENGE_PERIOD_NS: i64 = 500_000_000;
/// Stacks scavenged per sysmon tick (each costs one madvise).
const SCAVENGE_BATCH: usize = 64;

/// Preemption requests honoured (statistics; only grows).
pub(crate) static PREEMPTIONS: AtomicU64 = AtomicU64::new(0);
/// Ps handed off from syscalls (statistics; only grows).
pub(crate) static HANDOFFS: AtomicU64 = AtomicU64::new(0);

/// GODEBUG=scheddetail=1: per-P/M/G lines after each SCHED line.
static SCHEDDETAIL: AtomicBool = AtomicBool::new(false);

/// schedtrace period in ms (0: off).
static SCHEDTRACE_MS: AtomicUsize = AtomicUsize::new(0);

/// Per-P state sysmon remembers between ticks (Go's sysmontick).
#[derive(Clone, Copy, Default)]
struct PTick {
    schedtick: u32,
    schedwhen: i64,
}

/// Starts the sysmon thread.
pub(crate) fn start(cfg: &crate::Config) {
    SCHEDTRACE_MS.store(cfg.schedtrace_ms, Ordering::Relaxed);
    SCHEDDETAIL.store(cfg.scheddetail, Ordering::Relaxed);
    extern "C" fn sysmon_c(_: *mut libc::c_void) -> *mut libc::c_void {
        sysmon()
    }
    if let Err(e) = crate::os::newosproc("goro-sysmon", 256 << 10, sysmon_c, core::ptr::null_mut())
    {
        crate::throw::throwf(format_args!("runtime: cannot start sysmon: {e}"));
    }
}

fn sysmon() -> ! {
    let start = crate::os::nanotime();
    let mut ticks = vec![PTick::default(); sched::MAX_PROCS];
    let mut idle = 0u32;
    let mut delay = 20u64;
    let mut last_trace = start;
    let mut last_scavenge = start;
    let mut scavenging = false;
    loop {
        if idle == 0 {
            delay = 20;
        } else if idle > 50 {
            delay = (delay * 2).min(10_000);
        }
        crate::os::usleep(delay);
        let now = crate::os::nanotime();
        // Go's sysmon timer check: a due timer on some P while nobody is
        // looking (all Ms asleep, none in netpoll) gets an M.
        if SCHED.npidle.load(Ordering::Relaxed) > 0 && SCHED.lastpoll.load(Ordering::Relaxed) != 0 {
            let due = (0..sched::gomaxprocs()).any(|i| {
                let w = sched::allp(i).timers.next_when();
                w != 0 && w < now - 1_000_000
            });
            if due {
                sched::wakep();
            }
        }
        // Stranded work: an idle P, no spinning M, yet runnable Gs in some
        // busy P's queue. Go's spinning protocol can leave this state when
        // a spinner keeps a stolen G in its queue while the last idle P
        // appears (its M gave up without spinning), and relies on
        // preempting the busy Gs to get there; goro, without asynchronous
        // preemption yet, wakes a spinner instead.
        if SCHED.npidle.load(Ordering::SeqCst) > 0 && SCHED.nmspinning.load(Ordering::SeqCst) == 0 {
            let stranded = SCHED.runqsize.load(Ordering::Relaxed) > 0
                || (0..sched::gomaxprocs()).any(|i| {
                    let p = sched::allp(i);
                    p.status() != crate::p::PStatus::Idle && !p.runq.is_empty()
                });
            if stranded {
                sched::wakep();
            }
        }
        poll_network(now);
        if retake(now, &mut ticks) {
            idle = 0;
        } else {
            idle += 1;
        }
        // Scavenge free stacks every SCAVENGE_PERIOD_NS, a batch per tick.
        if scavenging || now - last_scavenge >= SCAVENGE_PERIOD_NS {
            scavenging = sched::scavenge_gfree(SCAVENGE_BATCH);
            last_scavenge = now;
        }
        let trace = SCHEDTRACE_MS.load(Ordering::Relaxed) as i64;
        if trace > 0 && now - last_trace >= trace * 1_000_000 {
            last_trace = now;
            schedtrace(now - start);
        }
    }
}

/// Go's sysmon netpoll: if goroutines wait on sockets and nobody has
/// polled for 10 ms, poll without blocking and queue the readied Gs
/// (inject_glist wakes idle Ps for them). Runs without a P.
fn poll_network(now: i64) {
    // Relaxed: a stale value only delays or repeats a non-blocking poll.
    let last = SCHED.lastpoll.load(Ordering::Relaxed);
    if crate::netpoll::has_waiters() && last != 0 && last + 10_000_000 < now {
        let _ = SCHED
            .lastpoll
            .compare_exchange(last, now, Ordering::SeqCst, Ordering::Relaxed);
        let mut list = Vec::new();
        crate::netpoll::netpoll(0, &mut list);
        sched::inject_glist(&list);
    }
}

/// Go's retake, cooperative half: flag Gs that have held a P too long.
/// Returns true if it did anything.
fn retake(now: i64, ticks: &mut [PTick]) -> bool {
    let mut did = false;
    for i in 0..sched::gomaxprocs() {
        let p = sched::allp(i);
        let t = &mut ticks[i];
        if p.status() != crate::p::PStatus::Running {
            continue;
        }
        // schedtick is owner-written; a racy read only delays a request.
        let tick = p.schedtick.get();
        if t.schedtick != tick {
            t.schedtick = tick;
            t.schedwhen = now;
        } else if t.schedwhen + FORCE_PREEMPT_NS <= now {
            let m = p.m.get();
            if !m.is_null() {
                // SAFETY: Ms and Gs are never freed; a stale curg only makes
                // the request land on a G that will clear it.
                let gp = unsafe { (*m).curg.get() };
                if !gp.is_null() {
                    // SAFETY: as above.
                    unsafe { (*gp).preempt.store(true, Ordering::Relaxed) };
                    did = true;
                }
            }
            t.schedwhen = now;
        }
    }
    did
}

/// Prints one Go-format SCHED line to stderr, and with scheddetail Go's
/// per-P, per-M and per-G lines. Reads other threads' state racily, as Go
/// does: the output is diagnostic.
fn schedtrace(uptime_ns: i64) {
    use std::fmt::Write;
    let s = sched::snapshot();
    let detail = SCHEDDETAIL.load(Ordering::Relaxed);
    let mut out = String::new();
    let runqs: Vec<String> = s.local_runq.iter().map(|n| n.to_string()).collect();
    let _ = write!(
        out,
        "SCHED {}ms: gomaxprocs={} idleprocs={} threads={} spinningthreads={} idlethreads={} runqueue={}",
        uptime_ns / 1_000_000,
        s.gomaxprocs,
        s.idle_procs,
        s.threads + 1, // + sysmon (Go counts it too)
        s.spinning_threads,
        s.idle_threads,
        s.global_runq,
    );
    if !detail {
        let _ = writeln!(out, " [{}]", runqs.join(" "));
        eprint!("{out}");
        return;
    }
    let _ = writeln!(
        out,
        " gcwaiting={} nmspinning={}",
        u8::from(SCHED.gcwaiting.load(Ordering::Relaxed)),
        s.spinning_threads
    );
    let mid = |m: *mut crate::m::M| {
        if m.is_null() {
            -1
        } else {
            // SAFETY: Ms are never freed; a racy diagnostic read.
            unsafe { (*m).id }
        }
    };
    for i in 0..s.gomaxprocs {
        let p = sched::allp(i);
        let _ = writeln!(
            out,
            "  P{}: status={} schedtick={} syscalltick={} m={} runqsize={} gfreecnt={} timerslen={}",
            i,
            p.status() as u32,
            p.schedtick.get(),
            p.syscalltick.load(Ordering::Relaxed),
            mid(p.m.get()),
            p.runq.len(),
            p.gfree_n.get(),
            u8::from(p.timers.next_when() != 0),
        );
    }
    for &mp in sched::ALLM.lock().iter() {
        // SAFETY: Ms are never freed; racy diagnostic reads.
        let m = unsafe { &*(mp as *const crate::m::M) };
        let pid = |p: *mut crate::p::P| {
            if p.is_null() {
                -1
            } else {
                // SAFETY: Ps are never freed; a racy diagnostic read.
                unsafe { (*p).id as i64 }
            }
        };
        let gid = |g: *mut crate::g::G| {
            if g.is_null() {
                -1
            } else {
                // SAFETY: Gs are never freed; a racy diagnostic read.
                unsafe { (*g).goid.get() as i64 }
            }
        };
        let _ = writeln!(
            out,
            "  M{}: p={} curg={} locks={} spinning={} lockedg={}",
            m.id,
            pid(m.p.get()),
            gid(m.curg.get()),
            m.locks.get(),
            m.spinning.get(),
            gid(m.lockedg.get()),
        );
    }
    for &gp in crate::g::ALLGS.lock().iter() {
        // SAFETY: Gs are never freed; racy diagnostic reads.
        let g = unsafe { &*(gp as *const crate::g::G) };
        let st = g.status();
        if st == crate::g::GStatus::Dead {
            continue;
        }
        let _ = writeln!(
            out,
            "  G{}: status={}({:?}) m={} lockedm={}",
            g.goid.get(),
            st as u32,
            st,
            mid(g.m.get()),
            mid(g.lockedm.get())
        );
    }
    eprint!("{out}");
}
