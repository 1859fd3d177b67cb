//! Stack shrinking: sysmon returns the dead part of a long-parked
//! goroutine's stack to the OS (what Go's shrinkstack achieves by copying).
//!
//! # The problem
//!
//! A goroutine that once recursed 200 KiB deep and now waits on a channel
//! keeps those pages resident for ever: goro's stacks cannot move (native
//! frames hold pointers into themselves), so Go's answer, copying the
//! frames to a smaller stack, is not available. But everything below a
//! parked G's saved stack pointer is dead: `mcall` pushed the G's whole
//! context (a `SwitchFrame`) at `g.sched.sp`, every live frame is above
//! it, and the red zone of the frame that called `mcall` is not live across
//! that call. So the pages below `sp` (past a slack of one page, for the
//! next calls after the G resumes) can be `madvise(MADV_DONTNEED)`d: they
//! fault back in zeroed when the G goes deep again.
//!
//! # The race
//!
//! A parked G can be readied at any moment by whoever finds it on its wait
//! queue (a channel sender, a timer, netpoll, a semaphore release, a
//! select), and run at once on another M. Pages released under a running G
//! are zeroed under its live frames. Designs rejected:
//!
//! 1. Check `status == Waiting`, then madvise: the G can be readied and
//!    running between the check and the system call (a TOCTOU race; the
//!    stress test `shrinker_races_wakeups` in tests/stack.rs fails
//!    on it in every run).
//! 2. Release at park time, on the G's own M: every park (the hottest path
//!    after the switch itself) would pay a system call, for parks that are
//!    mostly short.
//! 3. A per-G lock or flag that goready checks: an extra atomic on every
//!    wake-up, paid by every channel operation to protect a rare event.
//! 4. Unlink the G from its wait queue first: needs every wait queue's lock
//!    and kind (channel, sema, timer, netpoll, select's many queues).
//!
//! # The protocol (Go's `_Gscan`, castogscanstatus/casfrom_Gscanstatus)
//!
//! The status word itself is the lock, and only its owner-less state,
//! `Waiting`, is ever locked. sysmon's shrinker, for a G parked long
//! enough:
//!
//! 1. `try_scan`: CAS `Waiting -> Waiting | SCAN` (Acquire). If it fails
//!    the G is not parked (or is being readied): skip it.
//! 2. Re-reads `waitsince` (this park's stamp, now stable) and checks the
//!    park's age and the `HANDLED` mark again; reads `g.sched.sp` and
//!    `g.stack`.
//! 3. `madvise(MADV_DONTNEED)` of `[stack.lo, round_down(sp - page))` if
//!    that is at least `SHRINK_MIN_BYTES` (`Stack::release_dead`).
//! 4. Marks the park handled (`waitsince | HANDLED`).
//! 5. `end_scan`: CAS `Waiting | SCAN -> Waiting` (Release).
//!
//! Every transition out of `Waiting` (goready, park_m when its unlock
//! function refuses, netpoll's Gs in findRunnable and inject_glist: all of
//! them go through `G::cas_status(Waiting, _)`) is a CAS that expects
//! exactly `Waiting`: while the bit is set it fails, and the waker spins
//! (pause, then sched_yield) until the bit clears, then retries. So:
//!
//! - The G cannot leave Waiting between steps 1 and 5: nobody can make it
//!   Runnable, so no M can run it, so nothing touches its stack below `sp`.
//!   Wakers that write into a parked G's stack (a channel send copying
//!   into the receiver's slot, sudog fields) write into frames above `sp`,
//!   which the range never reaches; DONTNEED on other pages of the mapping
//!   does not disturb them.
//! - Exactly one of the shrinker's step-1 CAS and a waker's CAS wins: if
//!   the waker wins, step 1 fails and the shrinker touches nothing; if the
//!   shrinker wins, the waker waits for step 5.
//! - The G may have re-parked since the shrinker's first glance (a new
//!   park, a new `sp`): step 1's Acquire pairs with the Release of the
//!   park_m CAS that made it Waiting *this* time (mcall saved `sp` and
//!   gopark stamped `waitsince` before it), so step 2 reads this park's
//!   values, which stay fixed while the bit is held.
//! - Step 5's Release pairs with the Acquire of the waker's successful CAS:
//!   the madvise (complete, TLBs flushed, when the call returns) and the
//!   mark happen before the G runs again, on whatever M.
//!
//! While it holds a bit the shrinker takes no lock and allocates nothing
//! (wakers spin while holding locks: sched.lock in inject_glist, channel
//! locks), and holds one bit for one madvise only.
//!
//! # Cost
//!
//! The hot path does not change: a waker's successful CAS is the same
//! single instruction it was; the wait lives in the failure branch, which
//! used to throw. Readers of the status (`G::status`: the dump, the
//! deadlock check, scheddetail, `goroutine_parked`) mask the bit off and
//! see `Waiting`. "Once per park" costs nothing either: gopark already
//! stamps `waitsince` with the (even) park clock, and that store clears
//! the shrinker's `HANDLED` bit 0.
//!
//! # Policy
//!
//! A pass walks `ALLGS` (Go's allgs) from sysmon, `SCAN_PER_TICK` Gs and at
//! most `RELEASES_PER_TICK` madvise calls per sysmon tick, starting at most
//! once per period (500 ms, the free-stack scavenger's) and no sooner than
//! 99 times its own CPU time after the previous one ended (a 1% CPU budget,
//! as Go's background scavenger). A G qualifies once parked for the
//! period (`MIN_PARK_NS`), once per park. While every P is idle sysmon
//! runs a pass only if something ran since the last one (`dirty`) or a
//! G it saw was too young then, so an idle process stays asleep.

use crate::g::{GStatus, G};
use crate::os;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Bit 0 of `g.waitsince`: this park has been dealt with (released, or
/// found too small). Park-clock stamps are even, so gopark clears it.
pub(crate) const HANDLED: i64 = 1;

/// Smallest dead part worth a system call (bytes).
pub(crate) const SHRINK_MIN_BYTES: usize = 16 << 10;

/// Gs looked at per sysmon tick: at ~50 ns each (two loads of a cold G),
/// about 13 µs.
const SCAN_PER_TICK: usize = 256;

/// madvise calls per sysmon tick (a few µs to a few tens of µs each).
const RELEASES_PER_TICK: usize = 16;

/// The next pass starts no sooner than this many times the last pass's
/// CPU time after it ended: at most 1% of a CPU.
const BUDGET_FACTOR: i64 = 99;

/// Pass period (ns): a pass starts at most this often. 0 (test hook
/// `goro::__private::set_stack_shrink`): back to back, without the budget.
/// Relaxed: a setting read by sysmon; a stale value delays it by a pass.
pub(crate) static PERIOD_NS: AtomicI64 = AtomicI64::new(500_000_000);

/// A G qualifies once parked this long (ns; test hook as above).
pub(crate) static MIN_PARK_NS: AtomicI64 = AtomicI64::new(500_000_000);

/// Stacks whose dead part was released (statistics; only grows).
pub(crate) static SHRUNK: AtomicU64 = AtomicU64::new(0);
/// Bytes madvised by the shrinker (statistics; only grows; not all of them
/// were resident).
pub(crate) static SHRUNK_BYTES: AtomicU64 = AtomicU64::new(0);
/// Transitions out of Waiting that found the scan bit set and waited
/// (statistics; only grows; counted by `G::cas_status`).
pub(crate) static SCAN_WAITS: AtomicU64 = AtomicU64::new(0);

/// What looking at one G found.
enum Look {
    /// Not parked, already handled, or lost a race: nothing to remember.
    Skip,
    /// Parked, but qualifies only at this time (ns).
    Young(i64),
    /// Handled now; `true` if a madvise was made.
    Done(bool),
}

/// sysmon's stack shrinker (owned by the sysmon thread).
pub(crate) struct Shrinker {
    /// A chunk of `ALLGS` copied out under its lock (reused; allocated
    /// once, never while a scan bit is held).
    buf: Vec<usize>,
    /// Index in `ALLGS` of the next G the running pass looks at.
    cursor: usize,
    /// A pass is in progress.
    running: bool,
    /// When the current (or last) pass started, and its CPU time so far.
    pass_start: i64,
    pass_cost: i64,
    /// The next pass starts no sooner (period and budget).
    next_pass: i64,
    /// Earliest time a G this pass found too young qualifies (i64::MAX:
    /// none), and the same for the last complete pass.
    young_until: i64,
    pending: i64,
    /// Some P may have run (and a G parked) since the current pass began.
    dirty: bool,
}

impl Shrinker {
    pub(crate) fn new(now: i64) -> Shrinker {
        Shrinker {
            buf: Vec::with_capacity(SCAN_PER_TICK),
            cursor: 0,
            running: false,
            pass_start: now,
            pass_cost: 0,
            next_pass: now,
            young_until: i64::MAX,
            pending: i64::MAX,
            dirty: true,
        }
    }

    /// sysmon's tick while some P is busy: continue the pass in progress
    /// or start one if due.
    pub(crate) fn tick(&mut self, now: i64) {
        self.dirty = true;
        if self.running || now >= self.next_pass {
            self.step(now);
        }
    }

    /// sysmon woke from its idle sleep: some P may have run meanwhile.
    pub(crate) fn woken(&mut self) {
        self.dirty = true;
    }

    /// While every P is idle: runs a step if one is due. Returns how long
    /// sysmon may sleep before calling again (0: at once, after a short
    /// pause; i64::MAX: not until something runs).
    pub(crate) fn idle(&mut self, now: i64) -> i64 {
        let Some(due) = self.due() else {
            return i64::MAX;
        };
        if due > now {
            return due - now;
        }
        if self.step(now) {
            return 0;
        }
        match self.due() {
            Some(d) => (d - now).max(1),
            None => i64::MAX,
        }
    }

    /// When the next step should run with every P idle, if ever.
    fn due(&self) -> Option<i64> {
        if self.running {
            Some(0)
        } else if self.dirty {
            Some(self.next_pass)
        } else if self.pending != i64::MAX {
            Some(self.pending.max(self.next_pass))
        } else {
            None
        }
    }

    /// Looks at the next chunk of Gs, starting a pass if none is in
    /// progress. Returns whether the pass continues.
    fn step(&mut self, now: i64) -> bool {
        let t0 = os::nanotime();
        if !self.running {
            self.running = true;
            self.cursor = 0;
            self.pass_start = now;
            self.pass_cost = 0;
            self.young_until = i64::MAX;
            self.dirty = false;
        }
        // Relaxed: tunables written by a test hook; any value is valid.
        let min_park = MIN_PARK_NS.load(Ordering::Relaxed);
        self.buf.clear();
        let total = {
            let all = crate::g::ALLGS.lock();
            let end = all.len().min(self.cursor + SCAN_PER_TICK);
            self.buf.extend_from_slice(&all[self.cursor.min(end)..end]);
            all.len()
        };
        let mut released = 0;
        let mut looked = 0;
        for &gp in &self.buf {
            looked += 1;
            match look(gp as *mut G, now, min_park) {
                Look::Skip | Look::Done(false) => {}
                Look::Young(at) => self.young_until = self.young_until.min(at),
                Look::Done(true) => {
                    released += 1;
                    if released == RELEASES_PER_TICK {
                        break;
                    }
                }
            }
        }
        self.cursor += looked;
        let t1 = os::nanotime();
        self.pass_cost += t1 - t0;
        if self.cursor >= total {
            self.running = false;
            self.pending = self.young_until;
            let period = PERIOD_NS.load(Ordering::Relaxed);
            self.next_pass = if period == 0 {
                t1
            } else {
                (self.pass_start + period).max(t1 + BUDGET_FACTOR * self.pass_cost)
            };
        }
        self.running
    }
}

/// Looks at one G: releases the dead part of its stack if it has been
/// parked for `min_park` ns and this park is not handled yet (the protocol
/// in the essay above). sysmon only.
fn look(gp: *mut G, now: i64, min_park: i64) -> Look {
    // SAFETY: Gs are never freed (ALLGS holds every G ever allocated).
    let g = unsafe { &*gp };
    if g.status() != GStatus::Waiting {
        return Look::Skip;
    }
    // Relaxed: a hint only; re-read under the scan bit below.
    let ws = g.waitsince.load(Ordering::Relaxed);
    if ws & HANDLED != 0 {
        return Look::Skip;
    }
    if now - ws < min_park {
        return Look::Young(ws + min_park);
    }
    // Step 1.
    if !g.try_scan() {
        return Look::Skip;
    }
    // Held: until end_scan no lock, no allocation (wakers spin).
    // Step 2. Relaxed: try_scan's Acquire ordered this park's stamp
    // before us, and no one else writes it while the bit is held.
    let ws = g.waitsince.load(Ordering::Relaxed);
    let r = if ws & HANDLED != 0 {
        Look::Skip
    } else if now - ws < min_park {
        Look::Young(ws + min_park)
    } else {
        // SAFETY: the G is held Waiting: its context was saved by the
        // mcall of the park that try_scan's Acquire synchronised with, and
        // nothing writes it until the G is readied, which waits for
        // end_scan. `stack` is written only while a G is Dead or Idle (by
        // its owner, before the Release that published the G).
        let (sp, stack) = unsafe { ((*g.gobuf()).sp, g.stack.get()) };
        let page = os::page_size();
        // Step 3: release the dead part of the stack.
        let n = match stack {
            // SAFETY: sp is this park's saved context on this stack, and
            // the scan bit keeps the G from running until end_scan: nothing
            // uses the stack below sp meanwhile.
            Some(st) => unsafe { st.release_dead(sp, page, SHRINK_MIN_BYTES) },
            None => 0,
        };
        // Step 4. Relaxed: published by end_scan's Release.
        g.waitsince.store(ws | HANDLED, Ordering::Relaxed);
        if n > 0 {
            SHRUNK.fetch_add(1, Ordering::Relaxed); // statistics only
            SHRUNK_BYTES.fetch_add(n as u64, Ordering::Relaxed); // statistics only
        }
        Look::Done(n > 0)
    };
    // Step 5.
    g.end_scan();
    r
}
