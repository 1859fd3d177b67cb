//! Deadlock detection: Go's checkdead (proc.go), made sound for a library
//! runtime that shares its process with plain OS threads.
//!
//! # The problem
//!
//! Go declares "all goroutines are asleep" when no M is running and no
//! goroutine can be woken by a timer or the network: in Go every thread
//! that could act is an M the runtime counts. goro cannot see user
//! threads: a `std::thread` may hold a `Sender` (moved to it before the
//! runtime even knew) and send after a sleep; a thread may hold a
//! `JoinHandle` or a `Waker`. Any such thread is a possible waker, and the
//! requirement is zero false positives.
//!
//! # The rule
//!
//! Report a deadlock only when, at one instant, all of the following hold
//! (checked by the last M going idle, in `stopm`, under `sched.lock` like
//! Go):
//! 1. every M is on the idle list (`nmidle == mcount`): no M runs a G, is
//!    spinning, sits in netpoll, is locked to a G (stoplockedm), sleeps for
//!    a pinned preempted G, or runs a G in a syscall or detached by blocking
//!    detection (those Ms are not idle);
//! 2. the global run queue and every P's local run queue are empty and no P
//!    has a timer (live or stale: a stale one still wakes an M);
//! 3. every live G is Waiting, not locked to a thread, and its wait reason
//!    is one that only another goroutine or thread can end (channel, select,
//!    sync, join): `sleep`, `IO wait` (netpoll) and `future wait` (a Waker
//!    may be held by anything) count as possible wakers;
//! 4. every OS thread of the process is accounted for: the process has
//!    exactly `mcount + (other runtime threads) + (plain threads blocked
//!    indefinitely in a goro Parker)` threads (`/proc/self/task`). A plain
//!    thread blocked in `goro::run`, a join, a channel or sync operation
//!    without deadline is a waiter, not a waker; any other thread (sleeping,
//!    computing, blocked in a std primitive or in a timed goro wait) is a
//!    possible waker and suppresses the report.
//!
//! Condition 4 is read as (epoch, parked, conditions 1-3, /proc count,
//! parked, epoch): a
//! plain thread changes `PLAIN_PARKED` and bumps `PARK_EPOCH` on every park
//! and every wake (the waker decrements for it, before the woken thread
//! runs), so equal epochs mean the set of parked plain threads did not
//! change around the count; a thread not parked during the count is
//! counted by /proc and not by us, and fails the equality. Conditions 1–3
//! are stable while we hold `sched.lock` and no thread acts: a G becomes
//! runnable only by an M (none runs), a timer (none), netpoll (no M in it)
//! or a plain thread (none unaccounted, and a parked one cannot act).
//!
//! # Limits (false negatives, never false positives)
//!
//! - Any extra thread in the process disables the report while it lives,
//!   even one unrelated to goro (a logger thread, a libtest harness thread:
//!   deadlock tests run in a child without the libtest harness).
//! - Under an emulator that adds its own threads (qemu-user's RCU thread)
//!   the count never matches; `GORO_DEADLOCK_EXTRA_THREADS=N` declares N
//!   threads that never act (use only for such a known environment).
//! - Gs waiting in `block_on`, in `sleep`, or on a descriptor never count
//!   as deadlocked.
//! - The check runs when the last M goes idle; a deadlock that forms while
//!   an M stays busy elsewhere (a spinning user loop) is not reported. A
//!   check held back only by condition 4 is re-run by sysmon while the
//!   process stays idle (after 50 ms, doubling to 1 s), so a plain thread
//!   that exits later does not leave the deadlock unreported.
//!
//! Off with `Config::deadlock_detection(false)` or `GODEBUG=gorodeadlock=0`.

use crate::g::{GStatus, G};
use crate::waitreason::WaitReason;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Whether the check runs (Config::deadlock_detection). Relaxed: set once
/// at start, before any M can go idle.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Plain threads blocked without deadline in `Parker::park` (the waker
/// decrements on their behalf). May dip below the true value transiently
/// (a wake racing the increment), which only suppresses a report. SeqCst
/// with PARK_EPOCH: the check reads them in one total order with the
/// parkers' and wakers' updates.
pub(crate) static PLAIN_PARKED: AtomicI64 = AtomicI64::new(0);

/// Bumped on every change of PLAIN_PARKED (SeqCst, as above).
pub(crate) static PARK_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Runtime threads that are not Ms (sysmon, the template thread, the dump
/// thread), created by `os::newosproc` and never exiting, minus the Ms it
/// created: see [`thread_started`]. Relaxed counts: read only under
/// condition 1, after every counted thread has started.
static OS_THREADS: AtomicI64 = AtomicI64::new(0);
static M_THREADS: AtomicI64 = AtomicI64::new(0);

/// Called by `os::newosproc` for every runtime thread it starts.
pub(crate) fn thread_started() {
    OS_THREADS.fetch_add(1, Ordering::Relaxed);
}

/// Called by `newm1` for every M thread started (also counted by
/// [`thread_started`]); M exits are tracked by `sched.mcount`.
pub(crate) fn m_thread_started() {
    M_THREADS.fetch_add(1, Ordering::Relaxed);
}

/// How often each condition (index 0: Ms/run queue/netpoll, 1: run queues
/// and timers, 2: goroutine states, 3: thread accounting) stopped a check
/// that got that far. A test hook (`__private::deadlock_rejections`), so
/// the no-false-positive tests can show which rule kept them alive.
/// Relaxed: statistics.
pub(crate) static REJECTED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn reject(i: usize) {
    REJECTED[i].fetch_add(1, Ordering::Relaxed);
}

/// Sets the switch from the config at runtime start.
pub(crate) fn init(cfg: &crate::Config) {
    crate::waitreason::set_park_clock(crate::os::nanotime());
    ENABLED.store(cfg.deadlock_detection, Ordering::Relaxed);
}

/// A plain thread is about to block indefinitely in a Parker (called
/// after it published itself as parked).
#[inline]
pub(crate) fn plain_parked() {
    PLAIN_PARKED.fetch_add(1, Ordering::SeqCst);
    PARK_EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// A waker ended an indefinite Parker wait (before the thread runs).
#[inline]
pub(crate) fn plain_unparked() {
    PLAIN_PARKED.fetch_sub(1, Ordering::SeqCst);
    PARK_EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Go's checkdead. Called by `stopm` with `sched.lock` held, right after
/// putting its M on the idle list; `nmidle`, `runqsize` are the locked
/// values. Reports and exits the process (status 2) on a deadlock; returns
/// otherwise. g0, no P.
pub(crate) fn checkdead(nmidle: i32, runqsize: i32) {
    if !ENABLED.load(Ordering::Relaxed) || crate::dump::QUIT_PENDING.load(Ordering::Relaxed) {
        return;
    }
    // Relaxed: RECHECK_AT is sysmon's hint (below); cleared unless this
    // check ends on condition 4 again.
    let recheck = RECHECK_AT.load(Ordering::Relaxed) != 0;
    if recheck {
        RECHECK_AT.store(0, Ordering::Relaxed);
    }
    // The epoch is read before everything else: a plain thread that parks
    // while we check changes it (rejected), so any plain thread counted as
    // parked below was parked during the whole check, and whatever it did
    // before parking (a goready, a timer, a send) happened before this
    // SeqCst load (its parking RMW is SeqCst too) and is seen by the checks
    // of conditions 1-3.
    let e1 = PARK_EPOCH.load(Ordering::SeqCst);
    let p1 = PLAIN_PARKED.load(Ordering::SeqCst);
    let s = &crate::sched::SCHED;
    // Condition 1. Relaxed: mcount changes only under conditions that an
    // idle-only M set excludes (newm is called by a running M or thread).
    let mcount = s.mcount.load(Ordering::Relaxed);
    if nmidle != mcount || runqsize != 0 || s.gcwaiting.load(Ordering::Relaxed) {
        return reject(0);
    }
    if s.lastpoll.load(Ordering::SeqCst) == 0 {
        return reject(0); // an M is in netpoll
    }
    // Condition 2.
    for i in 0..crate::sched::gomaxprocs() {
        let p = crate::sched::allp(i);
        if !p.runq.is_empty() || p.timers.next_when() != 0 {
            return reject(1);
        }
    }
    // Condition 3.
    let mut n = 0usize;
    {
        let all = crate::g::ALLGS.lock();
        for &gp in all.iter() {
            // SAFETY: Gs are never freed; no M runs, so their fields are
            // stable (and only read racily for diagnostics otherwise).
            let g = unsafe { &*(gp as *const G) };
            match g.status() {
                GStatus::Dead | GStatus::Idle => continue,
                GStatus::Waiting => {}
                _ => return reject(2),
            }
            if !g.lockedm.get().is_null() {
                return reject(2);
            }
            match g.wait_reason() {
                WaitReason::Zero
                | WaitReason::Sleep
                | WaitReason::IoWait
                | WaitReason::FutureWait => return reject(2),
                _ => {}
            }
            n += 1;
        }
    }
    if n == 0 {
        return; // nothing to report (Go: "no goroutines (main called runtime.Goexit)")
    }
    // Condition 4.
    let Some(tasks) = count_tasks() else {
        return reject(3);
    };
    let p2 = PLAIN_PARKED.load(Ordering::SeqCst);
    let e2 = PARK_EPOCH.load(Ordering::SeqCst);
    if e1 != e2 || p1 != p2 {
        // A plain thread parked or woke during the check: look again
        // later too (it may have been the last one to park).
        schedule_recheck(recheck);
        return reject(3);
    }
    let others =
        OS_THREADS.load(Ordering::Relaxed) - M_THREADS.load(Ordering::Relaxed) + extra_threads();
    if tasks != mcount as i64 + others + p1 {
        // Only an unaccounted thread stands between us and a report: it
        // may exit while every M stays idle, and nothing would check
        // again. sysmon re-runs the check while the process stays idle.
        schedule_recheck(recheck);
        return reject(3);
    }
    report();
}

/// When sysmon should run `checkdead` again (nanotime; 0: no recheck
/// pending), and the gap to the one after (doubling from
/// RECHECK_FIRST_NS to RECHECK_MAX_NS while the verdict stays "a thread
/// we cannot account for"). Go has no such case: its deadlock check counts
/// only its own Ms. Before session 25 a plain thread that exited after the
/// last goroutine parked left the program hanging where it should have
/// reported (h14). Relaxed: a hint for sysmon; the check itself runs under
/// sched.lock.
static RECHECK_AT: AtomicI64 = AtomicI64::new(0);
static RECHECK_GAP: AtomicI64 = AtomicI64::new(0);
const RECHECK_FIRST_NS: i64 = 50_000_000;
const RECHECK_MAX_NS: i64 = 1_000_000_000;

fn schedule_recheck(again: bool) {
    let gap = if again {
        (RECHECK_GAP.load(Ordering::Relaxed) * 2).clamp(RECHECK_FIRST_NS, RECHECK_MAX_NS)
    } else {
        RECHECK_FIRST_NS
    };
    RECHECK_GAP.store(gap, Ordering::Relaxed);
    RECHECK_AT.store(crate::os::nanotime() + gap, Ordering::Relaxed);
}

/// For sysmon while every P is idle: the time of a pending recheck
/// (nanotime), or None.
pub(crate) fn recheck_at() -> Option<i64> {
    match RECHECK_AT.load(Ordering::Relaxed) {
        0 => None,
        t => Some(t),
    }
}

/// Threads that never act, declared by GORO_DEADLOCK_EXTRA_THREADS.
fn extra_threads() -> i64 {
    std::env::var("GORO_DEADLOCK_EXTRA_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

/// Number of kernel tasks (threads) of this process, or None if /proc is
/// unreadable (then no report: we cannot prove nothing else acts).
fn count_tasks() -> Option<i64> {
    let rd = std::fs::read_dir("/proc/self/task").ok()?;
    let mut n = 0;
    for e in rd {
        e.ok()?;
        n += 1;
    }
    Some(n)
}

/// Prints Go's report and exits with status 2 (Go's throw). The report
/// (with the dump's stack scans, which parse debug info: deep and
/// allocation-heavy) is written by a fresh thread with a large stack rather
/// than on this g0; we hold sched.lock meanwhile, which the dump never
/// takes. If no thread can be made, a short report (headers and resume pcs)
/// is written from here.
fn report() -> ! {
    const HEAD: &[u8] = b"fatal error: all goroutines are asleep - deadlock!\n\n";
    let t = std::thread::Builder::new()
        .name("goro-deadlock".into())
        .stack_size(8 << 20)
        .spawn(|| {
            let mut out = HEAD.to_vec();
            let _ = crate::dump::write_goroutines(&mut out, true);
            crate::dump::write_stderr(&out);
            // GORO_TRACE's file is written at exit(); _exit skips that.
            crate::trace::stop_at_fatal();
            // Exit status 2 (SIGABRT under GOTRACEBACK=crash), at once:
            // no destructors, the goroutines hold whatever they hold.
            crate::throw::fatal_exit()
        });
    if let Ok(t) = t {
        let _ = t.join();
    }
    let mut out = HEAD.to_vec();
    let _ = crate::dump::write_goroutines(&mut out, false);
    crate::dump::write_stderr(&out);
    crate::trace::stop_at_fatal();
    crate::throw::fatal_exit()
}
