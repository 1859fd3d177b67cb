//! sysmon: the monitor thread that runs without a P (Go's sysmon).
//!
//! It sleeps 20 µs, doubling after 1 ms of cycles without a hand-off up to
//! 10 ms (Go's rule; no more often than that while Ps are merely busy, see
//! MAX_DELAY_US), waking early for a preemption deadline it already knows,
//! and on each tick runs Go's retake:
//! - a P in Syscall for a whole tick (same syscalltick) is handed off
//!   (handoffp) if there is work for it, or after 10 ms in any case
//!   (syscall.rs has the protocol);
//! - a G that has run on one P for more than 10 ms while other work waits
//!   is preempted: the cooperative flag and SIGURG (preempt.rs);
//! - a P whose G has not changed for a tick while other work waits, and
//!   whose thread /proc shows blocked in a system call, is detached by the
//!   M's own SIGURG handler (blocking detection, preempt.rs), and retaken
//!   like a syscall P at the next tick;
//! - a detached M running user code again is signalled to take a P back.
//!
//! It also prints `GODEBUG=schedtrace` lines, and scavenges: 500 ms after
//! goroutines' stacks reached the global free lists (one per stack size
//! class) it returns all but their top page to the OS, 64 stacks per tick,
//! busy or idle (Go's stack freeing plus its background scavenger; Go 1.19
//! keeps a burst's stacks resident for minutes). It also releases the dead
//! part (below the saved sp) of the stacks of goroutines parked for a
//! period (shrink.rs, with its protocol).

use crate::sched::{self, SCHED};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// Go's forcePreemptNS: a G running this long on one P while other work
/// waits is preempted. Config::time_slice; written by [`configure`] at
/// each start attempt: before sysmon's thread is created (thread creation
/// orders it), or, when a failed start already created it, while sysmon
/// runs without Ps (Relaxed suffices: sysmon reloads it every tick, and
/// nothing runs that a stale value could preempt until a start succeeds).
static FORCE_PREEMPT_NS: AtomicI64 = AtomicI64::new(10_000_000);

/// How often free goroutine stacks give their cold pages back (ns).
const SCAVENGE_PERIOD_NS: i64 = 500_000_000;
/// Stacks scavenged per sysmon tick (each costs one madvise).
const SCAVENGE_BATCH: usize = 64;

/// Preemption requests honoured (statistics; only grows; Relaxed).
pub(crate) static PREEMPTIONS: AtomicU64 = AtomicU64::new(0);
/// Ps handed off from syscalls (statistics; only grows; Relaxed).
pub(crate) static HANDOFFS: AtomicU64 = AtomicU64::new(0);

/// GODEBUG=scheddetail=1: per-P/M/G lines after each SCHED line.
/// Relaxed as FORCE_PREEMPT_NS.
static SCHEDDETAIL: AtomicBool = AtomicBool::new(false);

/// schedtrace period in ms (0: off). Relaxed as FORCE_PREEMPT_NS.
static SCHEDTRACE_MS: AtomicUsize = AtomicUsize::new(0);

/// Per-P state sysmon remembers between ticks (Go's sysmontick).
#[derive(Clone, Copy, Default)]
struct PTick {
    schedtick: u32,
    schedwhen: i64,
    syscalltick: u32,
    syscallwhen: i64,
    /// Last /proc probe of this P's M (blocking detection).
    probed: i64,
    /// Probes of this P wait `PROBE_EVERY_NS << probe_backoff`: each probe
    /// that finds the thread computing (or runnable but descheduled, as
    /// under CPU contention, where a server's Ps often stall) doubles the
    /// wait, up to PROBE_BACKOFF_MAX; finding it blocked, or no probe for
    /// PROBE_BACKOFF_RESET_NS, resets it.
    probe_backoff: u8,
    /// The last probe found this P's M blocked and asked for a detach:
    /// the P's next G may be probed as soon as it has run
    /// DETECT_AFTER_NS (not PROBE_EVERY_NS after this probe), and the P,
    /// once in Syscall, is handed off at first sight (not after a whole
    /// tick). A run of goroutines that each block in an unwrapped call
    /// then costs about one sysmon tick each, as Go's syscalls do: with
    /// the spacing and the extra tick, 200 goroutines in `thread::sleep`
    /// at GOMAXPROCS=1 held a timer's goroutine, displaced from runnext
    /// to the back of the queue, for 50-90 ms (Go: 5-21 ms; h14).
    detach_asked: bool,
    /// When sysmon first set the flag of this P's G (without a signal) in
    /// the current slice (ns; 0: not yet). See PREEMPT_GRACE_NS.
    asked: i64,
    /// The M last asked, when, and its thread's CPU time then (-1:
    /// unknown).
    asked_m: usize,
    asked_last: i64,
    asked_cpu: i64,
    /// Next look at a pending request (ns), doubling its distance.
    asked_next: i64,
    /// Signals sent for the current request (each doubles the wait before
    /// the next, from the grace up to 1 ms).
    signalled: u32,
}

impl PTick {
    /// Asks the G running on `p` to yield, its slice being over: the flag
    /// at the first look, SIGURG once its thread has had PREEMPT_GRACE_NS
    /// of CPU time since (or a whole slice of wall time) without yielding.
    /// Returns when to look again (ns).
    fn request_preempt(&mut self, p: &crate::p::P, now: i64) -> i64 {
        let slice = FORCE_PREEMPT_NS.load(Ordering::Relaxed);
        let grace = PREEMPT_GRACE_NS.min(slice / 4);
        let mp = p.m.get();
        // SAFETY: Ms are never freed.
        let m = unsafe { mp.as_ref() };
        if crate::preempt::ASYNC_ONLY.load(Ordering::Relaxed) {
            crate::preempt::preemptone(p);
            return now + grace;
        }
        let first = self.asked == 0;
        if first {
            self.asked = now;
        }
        if now < self.asked_next && !first {
            return self.asked_next;
        }
        // A whole slice since the first request: the signal, whatever else
        // (Gs that hand the P on through runnext, each parking before it
        // reaches a check point, would otherwise keep it forever).
        let overdue = now - self.asked >= slice;
        if !overdue && (first || self.asked_m != mp as usize || !crate::preempt::preempt_pending(p))
        {
            // A first request, another M, or a G without the flag (the G
            // asked before yielded or parked, and a G from runnext
            // inherited the slice): ask the one running now, anew.
            crate::preempt::preempt_ask(p);
            if let Some(m) = m {
                // A new request: count its refusals afresh.
                m.foreign_refusals.store(0, Ordering::Relaxed);
            }
            self.asked_m = mp as usize;
            self.signalled = 0;
            self.asked_last = now;
            self.asked_cpu = thread_cputime(mp);
            self.asked_next = now + grace;
            return self.asked_next;
        }
        let cpu = thread_cputime(mp);
        let ran = if cpu >= 0 && self.asked_cpu >= 0 {
            cpu - self.asked_cpu
        } else {
            now - self.asked_last
        };
        if ran >= grace || overdue {
            let refusals = m.map_or(0, |m| m.foreign_refusals.load(Ordering::Relaxed));
            if overdue && refusals >= crate::preempt::FOREIGN_REFUSALS_TO_DETACH {
                // Still running a whole slice after the first request,
                // every recent signal refused with the pc outside the
                // executable (a loop that lives in libc: std::fs::read,
                // large memcpys): if the pc is there again, the handler
                // detaches its P instead.
                crate::preempt::preempt_or_detach(p);
            } else {
                crate::preempt::preemptone(p);
            }
            // A signal the handler refused (the pc in libc or the vDSO, a
            // runtime critical section, the pinned limit) is sent again
            // after the grace, doubling, at most every millisecond (a
            // quarter of a shorter slice): with the default slice, every
            // millisecond. Re-sending every 50 µs cost sysmon a fifth of a
            // CPU beside a loop inside libc.
            let cap = (slice / 4).clamp(grace, 1_000_000);
            self.asked_next = now + (grace << self.signalled.min(5)).min(cap);
            self.signalled += 1;
        } else {
            // Off its CPU: look again after as long again (a few looks per
            // millisecond at most), and at the overdue time at the latest.
            self.asked_next = (now + (now - self.asked_last).max(grace))
                .min(self.asked + slice)
                .max(now + 1);
        }
        self.asked_next
    }
}

/// CPU time (ns) used by `mp`'s thread, or -1 if unknown (no M, or the
/// kernel did not say).
fn thread_cputime(mp: *mut crate::m::M) -> i64 {
    if mp.is_null() {
        return -1;
    }
    // SAFETY: Ms are never freed; procid is atomic.
    let tid = unsafe { (*mp).procid.load(Ordering::Relaxed) };
    crate::os::thread_cputime(tid).unwrap_or(-1)
}

/// CPU time (ns) that a G asked to yield (its flag set) gets to reach a
/// check point before sysmon sends SIGURG: 1 ms, or a quarter of a
/// shorter time slice. Go signals at once: its flag is checked at every
/// function prologue and nearly always wins. goro's check points are its
/// runtime entries (channel, select, spawn, goro::sync calls), rarer in
/// user code, and a signal stops the G at an arbitrary instruction, often
/// inside a critical section of its own, whereupon the goroutines behind
/// it queue on that lock. The grace is counted in the G's thread's CPU
/// time (one clock_gettime per look): on a machine whose CPUs are all
/// busy the thread may be off its CPU for milliseconds, and a signal sent
/// meanwhile is delivered the moment it resumes, before it can reach a
/// check (measured: a lock loop at GOMAXPROCS=1 beside two CPU hogs took
/// 55% of its preemptions asynchronously with the signal sent at once,
/// 33% with 50 µs and 40% with 1 ms of wall-clock grace, 0 with this). A loop with
/// no check point runs up to 1 ms of CPU longer; a thread that gets no
/// CPU for a whole time slice after the request is signalled anyway.
/// 1 ms rather than session 23's 50 µs: in pinned mode (the default) an
/// asynchronous preemption hands the P to another thread and back, and
/// with both CPUs busy the woken thread waited up to 4 ms for one (perf
/// sched). Workers computing 0.3 ms between channel operations (a
/// parallel Mandelbrot, 8 workers on 2 Ps) were all preempted by signal
/// and lost 12-20% of their wall time to those waits: 0.121-0.138 s
/// against Go's 0.110-0.113 s; with 1 ms they yield at their next channel
/// operation, 0.112-0.117 s.
const PREEMPT_GRACE_NS: i64 = 1_000_000;

/// Rounds without a P hand-off after which sysmon's sleep starts doubling
/// from 20 µs (Go's sysmon: 50).
const BACKOFF_AFTER: u32 = 50;

/// Longest sysmon sleep (Go's 10 ms), also while Ps are busy, unless
/// sysmon preempted a G within ATTENTIVE_NS. A tick wakes a thread on a
/// machine whose CPUs are all taken (a server beside its load generator):
/// with the 1 ms cap that goro had while any P was busy, `wrk -c100`
/// against examples/http_hello on 2 CPUs served ~5–8% fewer requests, as
/// many as with no sysmon at all. The cost is Go's: the first time a G
/// computes past its slice, it is preempted 10–20 ms after it started.
const MAX_DELAY_US: u64 = 10_000;

/// For this long after a preemption, sysmon ticks at most every
/// ATTENTIVE_DELAY_US: a G that computes has neighbours that keep getting
/// a fresh slice (a ticker beside a CPU loop), and each of their slices
/// starts at an instant sysmon only learns at its next tick. Go has no
/// such window (its worst lateness there is 10–20 ms); with it, goro's is
/// within ~1 ms after the first preemption.
const ATTENTIVE_NS: i64 = 100_000_000;

/// Longest sleep within ATTENTIVE_NS of a preemption (a tenth of the
/// default 10 ms slice; a quarter of a Config::time_slice below 4 ms).
const ATTENTIVE_DELAY_US: u64 = 1_000;

/// sysmon's timer slack (ns; `os::set_timer_slack`).
const SYSMON_TIMER_SLACK_NS: u64 = 1_000;

/// A P whose G has not changed for this long, with other work waiting, is
/// probed for a blocked thread.
const DETECT_AFTER_NS: i64 = 50_000;

/// Probes of one P's M at most this often.
const PROBE_EVERY_NS: i64 = 200_000;

/// Largest `PTick::probe_backoff`: probes of a P whose thread was found
/// running back off to one per 12.8 ms (2 Ps busy serving HTTP beside
/// `wrk` on 2 cores: ~360 probes/s, 3 system calls each, before).
const PROBE_BACKOFF_MAX: u8 = 6;

/// A P not probed for this long starts again at PROBE_EVERY_NS.
const PROBE_BACKOFF_RESET_NS: i64 = 100_000_000;

/// sysmon waits for a P to become busy (rather than ticking) only once no
/// P has scheduled anything for this long. Measured over ticks, not one
/// tick: right after a wake sysmon ticks every 20 µs, and a goroutine
/// sleeping 100 µs at a time looked idle for two ticks in a row, so sysmon
/// waited and was woken again ~4,000 times a second.
const QUIET_NS: i64 = 10_000_000;

/// Stores `cfg`'s settings that sysmon reads (time slice, schedtrace
/// period and detail). Called by every start attempt, also when a failed
/// one already created sysmon (h45: they were stored only when sysmon was
/// created, so a retried start kept the failed one's). Never blocks.
pub(crate) fn configure(cfg: &crate::Config) {
    SCHEDTRACE_MS.store(cfg.schedtrace_ms, Ordering::Relaxed);
    SCHEDDETAIL.store(cfg.scheddetail, Ordering::Relaxed);
    let slice = i64::try_from(cfg.time_slice.as_nanos()).unwrap_or(i64::MAX);
    FORCE_PREEMPT_NS.store(slice, Ordering::Relaxed);
}

/// Starts the sysmon thread (after [`configure`]).
pub(crate) fn start() -> std::io::Result<()> {
    extern "C" fn sysmon_c(_: *mut libc::c_void) -> *mut libc::c_void {
        sysmon()
    }
    crate::os::newosproc("goro-sysmon", 256 << 10, sysmon_c, core::ptr::null_mut())
}

fn sysmon() -> ! {
    // Sleeps of 20 µs (Go's first delay) took 70 µs or more under the
    // default 50 µs slack, and every hand-off of a P blocked in a system
    // call waits one or two of them. With 1 µs, 50 goroutines each doing
    // 20 cycles of a 2 ms unwrapped std::thread::sleep and a 200 µs goro
    // sleep at GOMAXPROCS=1 took 178-188 ms instead of 242-246 (Go 78-80;
    // each cycle needs a blocking detection), and the same with the sleep
    // in goro::blocking 57-60 ms instead of 72-83, for 0.12-0.14 s of CPU
    // instead of 0.09-0.10 (docs/BENCHMARKS.md, session 26). Go keeps the
    // default slack.
    crate::os::set_timer_slack(SYSMON_TIMER_SLACK_NS);
    crate::signal_unix::unblock_runtime_signals();
    let start = crate::os::nanotime();
    let mut ticks = vec![PTick::default(); sched::MAX_PROCS];
    let mut idle = 0u32;
    let mut delay = 20u64;
    let mut last_trace = start;
    let mut scavenger = Scavenger {
        last: start,
        running: false,
    };
    let mut shrinker = crate::shrink::Shrinker::new(start);
    let mut last_detached_scan = start;
    let mut detached_cursor = 0usize;
    let mut last_counters = start;
    let mut last_activity = sched_activity();
    // When sysmon last saw sched_activity change (ns).
    let mut last_active = start;
    // Earliest time (ns) at which a G retake saw running will have used
    // its time slice while work waits (0: none known).
    let mut next_deadline = 0i64;
    // When retake last asked a G to yield its P (ns; 0: never).
    let mut last_preempt = 0i64;
    loop {
        if idle == 0 {
            delay = 20;
        } else if idle > BACKOFF_AFTER {
            delay = (delay * 2).min(MAX_DELAY_US);
        }
        // Every P idle *and* nothing ran for QUIET_NS: a server whose Ps
        // go idle between requests stays on ordinary ticks rather than
        // waking sysmon from its wait on every idle-to-busy turn (a futex
        // wake under sched.lock in acquirep, then sysmon's ramp from
        // 20 µs: ~650 waits a second under wrk before).
        let activity = sched_activity();
        if activity != last_activity {
            last_activity = activity;
            last_active = crate::os::nanotime();
        }
        let quiet = crate::os::nanotime() - last_active >= QUIET_NS;
        if SCHEDTRACE_MS.load(Ordering::Relaxed) == 0 && quiet && all_idle() {
            // An idle program still returns freed stacks (a burst that just
            // ended is the common case): scavenge in batches before
            // sleeping, and sleep no longer than the scavenge period while
            // hot stacks wait.
            let now = crate::os::nanotime();
            if (scavenger.running || sched::gfree_hot()) && scavenger.tick(now) {
                crate::os::usleep(20);
                continue;
            }
            // Long-parked goroutines' stacks too (shrink.rs): a pass if
            // something ran since the last one, or a G it saw then has
            // parked long enough now.
            let shrink_cap = shrinker.idle(now);
            if shrink_cap == 0 {
                crate::os::usleep(20);
                continue;
            }
            // A deadlock check that only an unaccounted OS thread held
            // back is run again: the thread may have exited since.
            let mut recheck_cap = i64::MAX;
            if let Some(at) = crate::deadlock::recheck_at() {
                if at <= now {
                    sched::checkdead_locked();
                }
                if let Some(at) = crate::deadlock::recheck_at() {
                    recheck_cap = (at - now).max(1_000_000);
                }
            }
            let cap = if sched::gfree_hot() {
                (scavenger.last + SCAVENGE_PERIOD_NS - now).max(1_000_000)
            } else {
                i64::MAX
            }
            .min(shrink_cap)
            .min(recheck_cap);
            if sysmon_wait(cap) {
                crate::waitreason::set_park_clock(crate::os::nanotime());
                shrinker.woken();
                // A P is busy again: look at it soon (20 µs, Go's first
                // delay), but back off at once (doubling from the next
                // round) rather than after BACKOFF_AFTER rounds of 20 µs.
                // A server whose Ps go idle between requests wakes sysmon
                // hundreds of times a second; with the full reset, sysmon
                // woke ~3,300 times a second under wrk, ~1,200 with this
                // (docs/PREEMPTION.md).
                idle = BACKOFF_AFTER + 1;
                delay = 10; // doubled to 20 at the top of the loop
                continue;
            }
        }
        // No longer than the time slice (a shorter Config::time_slice keeps
        // its own precision), nor past a preemption deadline retake knows.
        // Reloaded each tick: a retried start may have changed it.
        let force_preempt_ns = FORCE_PREEMPT_NS.load(Ordering::Relaxed);
        let mut sleep_us = delay.min((force_preempt_ns / 1_000).max(20) as u64);
        if last_preempt != 0 && crate::os::nanotime() - last_preempt < ATTENTIVE_NS {
            sleep_us =
                sleep_us.min(ATTENTIVE_DELAY_US.min((force_preempt_ns / 4_000).max(20) as u64));
        }
        if next_deadline != 0 {
            let until = (next_deadline - crate::os::nanotime()) / 1_000;
            sleep_us = sleep_us.min(until.max(20) as u64);
        }
        crate::os::usleep(sleep_us);
        let now = crate::os::nanotime();
        crate::waitreason::set_park_clock(now); // gopark's waitsince stamp (issue 12)
                                                // Go's sysmon timer check: a due timer on some P while nobody is
                                                // looking (all Ms asleep, none in netpoll) gets an M.
                                                // GODEBUG=gorosysmonrescue=0 (a test knob) turns off both rescues
                                                // below so that tests see lost wake-ups as hangs.
        let rescue = crate::SYSMON_RESCUE.load(Ordering::Relaxed);
        if rescue
            && SCHED.npidle.load(Ordering::Relaxed) > 0
            && SCHED.lastpoll.load(Ordering::Relaxed) != 0
        {
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
        // preempting the busy Gs to get there; goro wakes a spinner.
        if rescue
            && SCHED.npidle.load(Ordering::SeqCst) > 0
            && SCHED.nmspinning.load(Ordering::SeqCst) == 0
        {
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
        if crate::trace::on() && now - last_counters >= 1_000_000 {
            last_counters = now;
            crate::trace::sample_counters();
        }
        // Go resets the back-off only when retake handed a P off.
        let r = retake(now, &mut ticks);
        next_deadline = r.deadline;
        if r.preempted > 0 {
            last_preempt = now;
        }
        if r.handed_off > 0 {
            idle = 0;
        } else {
            idle += 1;
        }
        if now - last_detached_scan >= PROBE_EVERY_NS {
            last_detached_scan = now;
            signal_detached_running(now, &mut detached_cursor);
        }
        scavenger.tick(now);
        shrinker.tick(now);
        // Saturating: a period whose nanoseconds overflow an i64 (about
        // 292 years) means "never"; before h40 it wrapped negative and
        // printed on every tick.
        let trace = i64::try_from(SCHEDTRACE_MS.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        if trace > 0 && now - last_trace >= trace.saturating_mul(1_000_000) {
            last_trace = now;
            schedtrace(now - start, SCHEDDETAIL.load(Ordering::Relaxed));
        }
        // A deadlock check held back by an unaccounted thread is re-run
        // from the idle wait above, which sysmon skips while schedtrace
        // prints (h45: with GODEBUG=schedtrace a deadlock that became
        // provable when a plain thread exited hung instead of being
        // reported). checkdead proves everything itself; all_idle only
        // saves taking sched.lock while a P is busy.
        if trace > 0 && all_idle() && crate::deadlock::recheck_at().is_some_and(|at| at <= now) {
            sched::checkdead_locked();
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

/// sysmon's stack scavenger: a pass every SCAVENGE_PERIOD_NS, then a
/// batch of SCAVENGE_BATCH stacks per call until the global hot lists of
/// every stack size class are done (sched::scavenge_gfree decides what may
/// go).
struct Scavenger {
    /// When the last batch ran (ns).
    last: i64,
    /// More batches follow the last one.
    running: bool,
}

impl Scavenger {
    /// Runs a batch if one is due; returns whether more batches follow.
    fn tick(&mut self, now: i64) -> bool {
        if self.running || now - self.last >= SCAVENGE_PERIOD_NS {
            self.running = sched::scavenge_gfree(SCAVENGE_BATCH);
            self.last = now;
        }
        self.running
    }
}

/// A number that changes whenever any P is acquired, schedules a G with a
/// new time slice, or makes a guarded system call: the sum of their
/// acquireticks, schedticks and syscallticks (owner-written counters; a
/// racy read is at worst one tick stale, which only delays sysmon's wait
/// by a tick).
fn sched_activity() -> u32 {
    (0..sched::gomaxprocs()).fold(0u32, |a, i| {
        let p = sched::allp(i);
        a.wrapping_add(p.acquiretick.get())
            .wrapping_add(p.schedtick.get())
            .wrapping_add(p.syscalltick.load(Ordering::Relaxed))
    })
}

/// Every P idle (none running, none in a syscall) and no stop-the-world.
fn all_idle() -> bool {
    SCHED.npidle.load(Ordering::Relaxed) == sched::gomaxprocs() as i32
        && !SCHED.gcwaiting.load(Ordering::Relaxed)
}

/// Go's sysmonwait: with every P idle there is nothing to retake or
/// preempt, so sysmon sleeps until the next timer (to rescue it if no M
/// is polling), until acquirep wakes it, or for at most `cap_ns` (the
/// scavenger's next pass while freed stacks wait for it). An idle process
/// thus makes no periodic wake-ups once its free stacks are returned.
/// Returns whether it slept.
fn sysmon_wait(cap_ns: i64) -> bool {
    let now = crate::os::nanotime();
    let next = (0..sched::gomaxprocs())
        .map(|i| sched::allp(i).timers.next_when())
        .filter(|&w| w != 0)
        .min();
    // The rescue fires 1 ms after a timer is due.
    let sleep = match next {
        Some(w) => (w.saturating_add(1_000_000) - now).min(60_000_000_000),
        None => 60_000_000_000,
    }
    .min(cap_ns);
    if sleep <= 0 {
        return false;
    }
    {
        let _s = SCHED.lock.lock();
        if !all_idle() {
            return false;
        }
        SCHED.sysmonwait.store(true, Ordering::Relaxed);
    }
    SCHED.sysmonnote.sleep_timeout(sleep);
    let _s = SCHED.lock.lock();
    if SCHED.sysmonwait.load(Ordering::Relaxed) {
        // Timed out: nobody will wake the note now (wake_sysmon checks
        // sysmonwait under the lock).
        SCHED.sysmonwait.store(false, Ordering::Relaxed);
    }
    SCHED.sysmonnote.clear();
    true
}

/// Whether `p` has work that its running G keeps from running: local or
/// global runnable Gs, a due timer, or a stop-the-world.
fn has_waiting_work(p: &crate::p::P, now: i64) -> bool {
    if !p.runq.is_empty() || SCHED.runqsize.load(Ordering::Relaxed) > 0 {
        return true;
    }
    let w = p.timers.next_when();
    (w != 0 && w <= now) || SCHED.gcwaiting.load(Ordering::Relaxed)
}

/// Work waits in some P's local queue while no P is idle and no M spins:
/// nobody will steal it, so it runs only when that P's G yields. Go's
/// retake counts this as waiting work for every P (`npidle + nmspinning
/// == 0`). Without it, a P whose thread blocked in an unwrapped call was
/// never probed (nothing waited on that P itself) while a G queued behind
/// a loop on the other P waited for the loop to end, which with async
/// preemption off (asyncpreemptoff, a static libc) could be never (h37:
/// std socket readers waited a hog's whole 8 s at GOMAXPROCS=2, Go 0.3
/// s). A due timer on some P counts too: another P's M runs it only from
/// findrunnable (steal_work's timer check), so behind a loop it waited
/// just the same (h38: a 100 ms sleep took a 5 s hog's whole run; Go
/// 100 ms). Once per retake pass; Relaxed and racy: a wrong answer costs
/// one probe or delays one by a tick.
fn stranded_work(now: i64) -> bool {
    if SCHED.npidle.load(Ordering::Relaxed) != 0 || SCHED.nmspinning.load(Ordering::Relaxed) != 0 {
        return false;
    }
    (0..sched::gomaxprocs()).any(|i| {
        let p = sched::allp(i);
        let w = p.timers.next_when();
        !p.runq.is_empty() || (w != 0 && w <= now)
    })
}

/// What one `retake` pass did.
struct Retake {
    /// Ps handed off from syscalls or detached by blocking detection.
    handed_off: u32,
    /// Gs asked to yield their P (preemptone).
    preempted: u32,
    /// Earliest time (ns; 0: none) at which a G seen running on an
    /// unchanged schedtick with work waiting will have used its time
    /// slice: sysmon's next sleep ends there.
    deadline: i64,
}

/// Go's retake: hand off Ps stuck in syscalls, preempt Gs that have run
/// too long, and detect Ms blocked in unguarded calls.
fn retake(now: i64, ticks: &mut [PTick]) -> Retake {
    use crate::p::PStatus;
    let mut n = 0;
    let mut preempted = 0;
    let mut deadline = 0i64;
    let stranded = stranded_work(now);
    for (i, t) in ticks.iter_mut().enumerate().take(sched::gomaxprocs()) {
        let p = sched::allp(i);
        let mut s = p.status();
        let mut sysretake = false;
        if s == PStatus::Running || s == PStatus::Syscall {
            // schedtick is owner-written; a racy read only delays a request.
            let tick = p.schedtick.get();
            if t.schedtick != tick {
                t.schedtick = tick;
                t.schedwhen = now;
                t.asked = 0;
                if t.detach_asked && s == PStatus::Running {
                    // A new G since the detach: probe it on its own merits.
                    t.detach_asked = false;
                    t.probed = 0;
                }
            } else {
                let ran = now - t.schedwhen;
                let slice_over = ran >= FORCE_PREEMPT_NS.load(Ordering::Relaxed);
                if s == PStatus::Running && (stranded || has_waiting_work(p, now)) {
                    if now - t.probed >= PROBE_BACKOFF_RESET_NS {
                        t.probe_backoff = 0;
                    }
                    // A G blocked in the kernel cannot be preempted (its pc
                    // is in libc): detect that first, then preempt.
                    let detached = ran >= DETECT_AFTER_NS
                        && now - t.probed >= PROBE_EVERY_NS << t.probe_backoff
                        && crate::preempt::DETECT_ENABLED.load(Ordering::Relaxed)
                        && {
                            t.probed = now;
                            match detect_blocked(p) {
                                Some(true) => {
                                    t.probe_backoff = 0;
                                    t.detach_asked = true;
                                    true
                                }
                                Some(false) => {
                                    t.probe_backoff = (t.probe_backoff + 1).min(PROBE_BACKOFF_MAX);
                                    false
                                }
                                None => false,
                            }
                        };
                    if detached {
                        n += 1;
                        // The handler usually runs within microseconds:
                        // wait that long and hand the P off in this tick
                        // rather than the next, a sleep of 20 µs or more
                        // away.
                        if wait_detached(p) {
                            s = PStatus::Syscall;
                        }
                    } else if slice_over {
                        let next = t.request_preempt(p, now);
                        if deadline == 0 || next < deadline {
                            deadline = next;
                        }
                        preempted += 1;
                    } else {
                        // Saturating: the longest slices (`time_slice(
                        // Duration::MAX)`, "never") end at i64::MAX ns; a
                        // wrapped sum aborted debug builds (h45).
                        let due = t
                            .schedwhen
                            .saturating_add(FORCE_PREEMPT_NS.load(Ordering::Relaxed));
                        if deadline == 0 || due < deadline {
                            deadline = due;
                        }
                    }
                }
                // In a syscall preemptone cannot work: retake instead.
                sysretake = slice_over;
            }
        }
        if s == PStatus::Syscall {
            // Retake a P from a syscall if it has been there for a whole
            // sysmon tick (Go's rule), or the G has held the P for 10 ms
            // (sysretake: preemptone cannot reach a G in a syscall).
            let st = p.syscalltick.load(Ordering::Relaxed);
            if t.syscalltick != st {
                t.syscalltick = st;
                t.syscallwhen = now;
                // A P we had detached is known to be blocked: no tick of
                // waiting to see whether the call returns at once.
                if !sysretake && !t.detach_asked {
                    continue;
                }
            }
            if t.detach_asked {
                // Once: a later syscall on this P follows Go's rule, and
                // its next G may be probed without PROBE_EVERY_NS.
                t.detach_asked = false;
                t.probed = 0;
            }
            // Only for work that waits — Go also retakes when no M is
            // spinning or idle, which with one P turns a loop of short
            // calls into a thread hand-off per tick — or once one call has
            // lasted 10 ms (so sysmon's view of the P stays current).
            let long = t.syscallwhen + 10_000_000 <= now;
            if !long && !stranded && !has_waiting_work(p, now) {
                continue;
            }
            // AcqRel CAS: exactly one of sysmon, the returning M (exitsyscall)
            // and stop-the-world takes it; we see its owner's writes.
            if p.cas_status(PStatus::Syscall, PStatus::Idle) {
                n += 1;
                p.syscalltick.fetch_add(1, Ordering::Relaxed);
                HANDOFFS.fetch_add(1, Ordering::Relaxed); // statistics only
                if crate::trace::on() {
                    crate::trace::syscall_handoff(i);
                }
                sched::handoffp(p as *const _ as *mut _);
            }
        }
    }
    Retake {
        handed_off: n,
        preempted,
        deadline,
    }
}

/// After a detach request: spins up to DETACH_WAIT_NS for the handler to
/// move `p` to Syscall. True if it did.
fn wait_detached(p: &crate::p::P) -> bool {
    let start = crate::os::nanotime();
    loop {
        if p.status() == crate::p::PStatus::Syscall {
            return true;
        }
        if crate::os::nanotime() - start > DETACH_WAIT_NS {
            return false;
        }
        crate::os::procyield(10);
    }
}

/// How long sysmon waits for a detach it asked for (ns).
const DETACH_WAIT_NS: i64 = 50_000;

/// Blocking detection: if the M running `p` is blocked in a system call in
/// user code, ask its SIGURG handler to detach the P (preempt.rs).
/// Some(true) if it asked, Some(false) if the thread was found not in a
/// system call, None if it did not probe or the probe told nothing.
fn detect_blocked(p: &crate::p::P) -> Option<bool> {
    let mp = p.m.get();
    if mp.is_null() {
        return None;
    }
    // SAFETY: Ms are never freed; racy reads of fields the handler re-checks.
    let m = unsafe { &*mp };
    if m.curg.get().is_null() || m.locks.get() != 0 {
        return None;
    }
    let blocked = thread_in_syscall(m.procid.load(Ordering::Relaxed))?;
    if blocked {
        crate::preempt::signal_m(m, crate::preempt::REQ_DETACH);
    }
    Some(blocked)
}

/// /proc probes of detached Ms per scan (each an open, a read and a close
/// of `/proc/self/task/<tid>/syscall`, ~6 µs each here).
const DETACHED_PROBES_PER_SCAN: usize = 16;

/// Longest gap between two probes of one detached M that was found blocked
/// (ns): a G that returns from a long-blocked call and computes without a
/// P is found within about this long.
const DETACHED_PROBE_MAX_GAP_NS: i64 = 1_000_000_000;

/// /proc probes of detached Ms so far (test hook
/// `__private::detached_probes`; only grows; Relaxed: a counter).
pub(crate) static DETACHED_PROBES: AtomicU64 = AtomicU64::new(0);

/// A detached M whose G computes again (its thread is not in the kernel)
/// is signalled to take a P back (preempt::on_signal).
///
/// Bounded: at most [`DETACHED_PROBES_PER_SCAN`] probes per scan, taken in
/// turn from where the last scan stopped, and an M found still blocked is
/// probed again only after a gap that doubles from `PROBE_EVERY_NS` up to
/// [`DETACHED_PROBE_MAX_GAP_NS`]. Before (h14): every detached M was probed
/// every 200 µs, so 1,000 goroutines parked in unwrapped socket or pipe
/// reads (a std::net server's idle connections) kept sysmon busy for
/// 440-680 ms of CPU per second, and with sysmon saturated, handing each
/// blocked P off took long enough that spawning 2,000 such readers took
/// 4.8-59 s at GOMAXPROCS=1 (Go: 0.3-2.8 s).
fn signal_detached_running(now: i64, cursor: &mut usize) {
    // Without async preemption the handler refuses to stop a detached G
    // (preempt::on_signal): signalling would only cost (h38, static libc:
    // 110,000 refused signals in 23 s for 50 detached allocators).
    // Relaxed: both are set once at start.
    if !crate::preempt::DETECT_ENABLED.load(Ordering::Relaxed)
        || !crate::preempt::ASYNC_ENABLED.load(Ordering::Relaxed)
    {
        return;
    }
    // No M is detached unless a detach is outstanding (each ends in exactly
    // one reacquire): skip the scan in the common case.
    // Relaxed: a stale count only delays the signal by one scan.
    if crate::preempt::RETAKES_DETECTED.load(Ordering::Relaxed)
        == crate::preempt::REACQUIRES.load(Ordering::Relaxed)
    {
        return;
    }
    let mut due = [core::ptr::null::<crate::m::M>(); DETACHED_PROBES_PER_SCAN];
    let mut n = 0;
    {
        let all = sched::ALLM.lock();
        let len = all.len();
        let start = if *cursor < len { *cursor } else { 0 };
        let mut next = start;
        for k in 0..len {
            let i = (start + k) % len;
            // SAFETY: Ms are never freed.
            let m = unsafe { &*(all[i] as *const crate::m::M) };
            // Relaxed (all three): sysmon's own bookkeeping, and the
            // detached flag is re-checked by the handler.
            if !m.detached.load(Ordering::Relaxed) {
                if m.detached_probe_gap.load(Ordering::Relaxed) != 0 {
                    m.detached_probe_gap.store(0, Ordering::Relaxed);
                    m.detached_probe_at.store(0, Ordering::Relaxed);
                }
                continue;
            }
            if m.detached_probe_at.load(Ordering::Relaxed) > now {
                continue;
            }
            if n == DETACHED_PROBES_PER_SCAN {
                next = i;
                break;
            }
            due[n] = m;
            n += 1;
            next = i + 1;
        }
        *cursor = next;
    }
    // Relaxed: a statistic.
    DETACHED_PROBES.fetch_add(n as u64, Ordering::Relaxed);
    for &mp in &due[..n] {
        // SAFETY: `due` holds pointers taken from ALLM above, and M structs
        // are never freed (an M whose thread exits, mexit, goes to the free
        // list for reuse), so each stays valid; only atomics and the tid
        // are read through it. A tid read after mexit is 0 (no probe); one
        // read just before may name another of our threads: a wrong probe
        // result at worst, and signal_m's spurious SIGURG.
        let m = unsafe { &*mp };
        match thread_in_syscall(m.procid.load(Ordering::Relaxed)) {
            Some(false) => {
                m.detached_probe_gap.store(0, Ordering::Relaxed);
                m.detached_probe_at.store(0, Ordering::Relaxed);
                crate::preempt::signal_m(m, crate::preempt::REQ_PREEMPT);
            }
            _ => {
                let gap = (m.detached_probe_gap.load(Ordering::Relaxed) * 2)
                    .clamp(PROBE_EVERY_NS, DETACHED_PROBE_MAX_GAP_NS);
                m.detached_probe_gap.store(gap, Ordering::Relaxed);
                m.detached_probe_at.store(now + gap, Ordering::Relaxed);
            }
        }
    }
}

/// Reads /proc/self/task/<tid>/syscall: Some(true) if the thread is
/// blocked in a system call, Some(false) if running, None if unknown.
/// Turns detection off (and says so in stats) if /proc cannot be read.
fn thread_in_syscall(tid: i32) -> Option<bool> {
    use std::io::Write;
    if tid == 0 {
        return None;
    }
    let mut path = [0u8; 64];
    let _ = write!(&mut path[..], "/proc/self/task/{tid}/syscall\0");
    // SAFETY: path is NUL-terminated; open/read/close on our own buffer.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        // Only a refusal is for good (/proc mounted with hidepid, or a
        // seccomp or LSM policy): running out of descriptors (EMFILE,
        // ENFILE) or memory passes, and a server that hit its fd limit
        // for a moment lost detection for the rest of its life (h17).
        // ENOENT: the thread has exited.
        if matches!(
            crate::os::last_os_error().raw_os_error(),
            Some(libc::EACCES | libc::EPERM)
        ) {
            crate::preempt::DETECT_UNAVAILABLE.store(true, Ordering::Relaxed);
            crate::preempt::DETECT_ENABLED.store(false, Ordering::Relaxed);
        }
        return None;
    }
    let mut buf = [0u8; 32];
    // SAFETY: fd is open; buf is ours.
    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r <= 0 {
        return None;
    }
    let b = &buf[..r as usize];
    if b.starts_with(b"running") {
        Some(false)
    } else if b[0].is_ascii_digit() {
        Some(true)
    } else {
        None // "-1 ...": in the kernel but not in a system call
    }
}

/// Prints one Go-format SCHED line to stderr, and with scheddetail Go's
/// per-P, per-M and per-G lines. Reads other threads' state racily, as Go
/// does: the output is diagnostic.
pub(crate) fn schedtrace(uptime_ns: i64, detail: bool) {
    use std::fmt::Write;
    let s = sched::snapshot();
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
        {
            // Not eprint!: the test harness captures that.
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(out.as_bytes());
        }
        return;
    }
    let _ = writeln!(
        out,
        " gcwaiting={} nmspinning={} stopwait={} sysmonwait={}",
        u8::from(SCHED.gcwaiting.load(Ordering::Relaxed)),
        s.spinning_threads,
        sched::stopwait(),
        u8::from(SCHED.sysmonwait.load(Ordering::Relaxed)),
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
            p.gfree.iter().map(|l| l.n.get()).sum::<i32>(),
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
            "  M{}: p={} nextp={} curg={} locks={} spinning={} lockedg={}",
            m.id,
            pid(m.p.get()),
            pid(m.nextp.get()),
            gid(m.curg.get_acquire()),
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
        // Go's line: the status number and, for a parked G, its wait
        // reason (waitreason.String(), empty otherwise); before, goro put
        // the status's name there, which a reader of Go's output misreads.
        let reason = match st {
            crate::g::GStatus::Waiting => g.wait_reason().as_str(),
            _ => "",
        };
        let _ = writeln!(
            out,
            "  G{}: status={}({}) m={} lockedm={}",
            g.goid.get(),
            st as u32,
            reason,
            mid(g.m.get()),
            mid(g.lockedm.get())
        );
    }
    // Not eprint!: the test harness captures that (and abort loses it).
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(out.as_bytes());
}
