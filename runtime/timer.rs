//! Per-P timers: a 4-ary min-heap per P (Go ≤ 1.22's time.go layout).
//!
//! A timer is an action due at a monotonic time (ns, see `os::nanotime`).
//! Timers are added to the current P's heap (or P 0's from a plain thread)
//! and run by whichever M schedules on that P or steals from it in its last
//! steal round (findRunnable); an M with nothing to do blocks in netpoll until
//! the earliest timer of all Ps (see sched.rs). Timers do not migrate when a
//! P goes idle; they move only when a P is destroyed by set_max_procs.
//!
//! User timers (`time::Timer`, `Ticker`, `after`, `tick`, `after_func`)
//! follow Go 1.23 (runtime/time.go, time/sleep.go): each is a shared
//! `TimerCore`; a heap entry carries a generation, and only the entry
//! whose generation is the core's `carrier` acts. `stop` leaves the entry
//! queued (Go's zombie); `reset` to a time no earlier than the queued
//! entry's reuses it (Go's timerModifiedLater: the entry re-queues itself
//! at the new time when it comes up), and otherwise queues a new
//! generation, which makes the old entry stale. So the `if !t.stop() {
//! <-t.c }; t.reset(d)` idiom of idle timeouts adds no heap entry per
//! message. Nothing is ever deleted from a heap eagerly. An entry that can
//! have no effect — a stale generation, a stopped timer's zombie, a select
//! timeout whose wait completed, or a channel timer none of whose
//! Receivers is left (nobody can observe it) — is dropped when it comes
//! due, or earlier by the bulk purge that runs whenever a heap has
//! doubled, so abandoned `after(1h)` timers do not hold memory.
//! `stop`/`reset` also discard a value sent but not received (under the
//! timer's lock, which a firing entry must take too), so no value from
//! before the call is ever received.

use crate::chan::Hchan;
use crate::g::G;
use crate::lock_futex::RtMutex as Mutex;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a timer does when it fires. Runs on g0 with a P, or on sysmon.
pub(crate) enum Action {
    /// Ready a goroutine parked in `time::sleep` (Go's goroutineReady).
    Ready(*mut G),
    /// Time out a goroutine's select/timed wait of generation `seq`, if no
    /// channel completed it first (see `G::selgen`).
    SelTimeout { gp: *mut G, seq: u64 },
    /// Fire a user timer (`time::Timer`, `Ticker`, `after`, `tick`,
    /// `after_func`) if it is still armed at generation `gen`: a `stop` or
    /// `reset` since this entry was queued bumped the generation and made
    /// the entry stale (Go 1.23 deletes lazily too).
    User { t: Arc<TimerCore>, gen: u64 },
    /// A poll descriptor's deadline carrier of generation `carrier`
    /// (netpoll.rs `DeadlineTimer`): stale once another carrier took over.
    Deadline {
        pd: &'static crate::netpoll::PollDesc,
        mode: crate::netpoll::Mode,
        carrier: u64,
    },
}

/// What a user timer does when it fires.
pub(crate) enum Kind {
    /// Send the current time on this channel without blocking (Go's
    /// sendTime). The core holds the channel's only "sender": the channel's
    /// sender count is never decremented, so it is never closed (Go never
    /// closes a timer channel), and it is freed once the receivers and the
    /// core are gone.
    Chan(Arc<Hchan>),
    /// Run the function in a new goroutine (Go's AfterFunc / goFunc).
    Func(Arc<dyn Fn() + Send + Sync>),
}

/// The shared state of one user timer (Go 1.23's `timer` struct for a
/// chan or func timer). The handle (`time::Timer`, `time::Ticker`) and
/// every heap entry for it hold an `Arc`.
///
/// Lock order: `st` before the channel's lock (`stop` drains the buffer
/// while holding `st`; `fire` sends while holding it). Heap entries are
/// added after `st` is released (an add may purge and drop other timers).
/// Nothing waits for `st` while holding a heap or channel lock (the purge
/// only tries it), and no user code runs while `st` is held.
pub(crate) struct TimerCore {
    /// The heap entry that acts for this timer. Its state is `st.c`.
    carrier: Carrier,
    st: Mutex<TimerState>,
    kind: Kind,
}

struct TimerState {
    /// The carrier's queued time and generations. A `reset` to a later
    /// time keeps the entry (Go's timerModifiedLater), which then re-queues
    /// itself at `due` when it comes up early, instead of adding an entry
    /// per reset (an idle timeout pushed back on every message).
    c: CarrierState,
    /// The timer is armed: it fires at `due` (or the deadline overflowed:
    /// armed but never due). While armed a carrier is queued at or before
    /// `due`; a stopped timer's may still be queued (a zombie).
    armed: bool,
    /// When the timer is due (ns), while armed.
    due: i64,
    /// Ticker period in ns; 0 for a one-shot timer.
    period: i64,
}

/// `Carrier::gen` when no heap entry acts.
const NO_ENTRY: u64 = u64::MAX;
/// `CarrierState::queued` when no heap entry acts.
const NOT_QUEUED: i64 = i64::MAX;

/// The one heap entry that acts for a timer whose time moves: a user
/// timer ([`TimerCore`]) or a socket deadline (netpoll.rs
/// `DeadlineTimer`). Each entry carries a generation, and only the entry
/// whose generation is the carrier's acts, so nothing is ever deleted from
/// a heap eagerly. A new arming rides on the queued entry if it comes up
/// no later ([`covers`](Carrier::covers)); the entry, coming up early,
/// re-queues itself at the new time ([`moved`](Carrier::moved); Go's
/// timerModifiedLater). An earlier arming queues a new generation
/// ([`next`](Carrier::next)), which makes the old entry stale for good.
/// The owner keeps a [`CarrierState`] under its lock and calls every
/// method but [`is`](Carrier::is) under it; entries are added after that
/// lock is released (an add may purge the heap and drop other timers): if
/// the carrier changes in between, the new entry is simply stale.
pub(crate) struct Carrier {
    /// Generation of the entry that acts, or [`NO_ENTRY`]. Written only
    /// under the owner's lock; read racily (Relaxed) by the heap purge,
    /// which drops entries that are not the carrier: the carrier only
    /// changes to NO_ENTRY or to a newer generation, so an entry that is
    /// not the carrier never becomes it again, and a stale read can only
    /// keep an entry one more round, never drop a live one.
    gen: AtomicU64,
}

/// The part of a [`Carrier`] its owner keeps under its lock.
pub(crate) struct CarrierState {
    /// The last generation handed out (the next gets one more).
    last: u64,
    /// When the carrier entry is queued; [`NOT_QUEUED`] when none acts.
    queued: i64,
}

impl CarrierState {
    pub(crate) const fn new() -> CarrierState {
        CarrierState {
            last: 0,
            queued: NOT_QUEUED,
        }
    }
}

impl Carrier {
    pub(crate) const fn new() -> Carrier {
        Carrier {
            gen: AtomicU64::new(NO_ENTRY),
        }
    }

    /// Whether the entry of generation `gen` is the carrier. Without the
    /// owner's lock only "not the carrier" is final (see `gen`).
    #[inline]
    pub(crate) fn is(&self, gen: u64) -> bool {
        // Relaxed: see the field.
        self.gen.load(Ordering::Relaxed) == gen
    }

    /// Whether a carrier is queued at or before `when`, so that an arming
    /// at `when` can ride on it.
    #[inline]
    pub(crate) fn covers(&self, st: &CarrierState, when: i64) -> bool {
        // Relaxed: written only under the owner's lock, which we hold.
        self.gen.load(Ordering::Relaxed) != NO_ENTRY && st.queued <= when
    }

    /// Hands out the next generation as the carrier, queued at `at`; the
    /// caller queues its entry after releasing its lock.
    pub(crate) fn next(&self, st: &mut CarrierState, at: i64) -> u64 {
        st.last += 1;
        // Relaxed: under the owner's lock; see the field.
        self.gen.store(st.last, Ordering::Relaxed);
        st.queued = at;
        st.last
    }

    /// The carrier, which came up early, re-queues itself (same
    /// generation) at `at`.
    #[inline]
    pub(crate) fn moved(st: &mut CarrierState, at: i64) {
        st.queued = at;
    }

    /// No entry acts any more (a queued one, if any, is stale).
    pub(crate) fn retire(&self, st: &mut CarrierState) {
        // Relaxed: under the owner's lock; see the field.
        self.gen.store(NO_ENTRY, Ordering::Relaxed);
        st.queued = NOT_QUEUED;
    }
}

impl TimerCore {
    /// A new, unarmed timer.
    pub(crate) fn new(kind: Kind, period: i64) -> Arc<TimerCore> {
        Arc::new(TimerCore {
            carrier: Carrier::new(),
            st: Mutex::new(TimerState {
                c: CarrierState::new(),
                armed: false,
                due: 0,
                period,
            }),
            kind,
        })
    }

    /// Whether the heap purge may drop an entry of generation `gen`: it is
    /// not the carrier (superseded for good), or it is but the timer is
    /// stopped (a zombie) or nobody can observe it (a channel timer with no
    /// Receiver left; a func timer always can be). The purge holds a heap
    /// lock, so `st` is only tried (lock order: `st` first); a carrier it
    /// drops is cleared under `st`, so a `reset` never reuses a dropped
    /// entry.
    fn purgeable(&self, gen: u64) -> bool {
        // A non-carrier stays one (Carrier::gen).
        if !self.carrier.is(gen) {
            return true;
        }
        let Some(mut st) = self.st.try_lock() else {
            return false; // busy: keep it one more round
        };
        if !self.carrier.is(gen) {
            return true;
        }
        let observable = match &self.kind {
            Kind::Chan(c) => c.has_receivers(),
            Kind::Func(_) => true,
        };
        if st.armed && observable {
            return false;
        }
        self.carrier.retire(&mut st.c);
        true
    }

    /// Disarms the timer and discards a value sent but not yet received
    /// (Go 1.23's Stop). Returns whether it was active: armed, or fired
    /// with its value still unreceived (one-shot timers only).
    pub(crate) fn stop(&self) -> bool {
        // `st` is a runtime lock (Go's lock()): `fire` takes it on g0
        // holding a P, so a goroutine preempted while holding it would
        // stall that P (for good when the preempted G waits, pinned, for a
        // P itself).
        let mut st = crate::m::lock_rt(&self.st);
        let active = self.discard_locked(&st);
        // The queued entry stays the carrier (Go 1.23's zombie): a `reset`
        // to a time no earlier reuses it; it is dropped when it comes up
        // unarmed, or by the heap purge.
        st.armed = false;
        active
    }

    /// Discards a value sent but not received; returns whether the timer
    /// was active (armed, or fired with its value still unreceived).
    fn discard_locked(&self, st: &TimerState) -> bool {
        let mut active = st.armed;
        if let Kind::Chan(c) = &self.kind {
            // After this no stale value can be received: a fire must take
            // `st` to send, and it will find the timer stopped or re-armed
            // for later. Only a
            // fire (holding `st`, which we hold) adds to the buffer, and
            // its count was published by its unlock of `st`: an empty
            // buffer stays empty, so it needs no channel lock (the stop
            // then reset idiom would take it twice).
            let dropped = if c.len() == 0 { 0 } else { c.clear_buffer() };
            if dropped > 0 && st.period == 0 {
                active = true;
            }
        }
        active
    }

    /// Re-arms the timer to fire after `d` (a ticker: every `d`), as Go
    /// 1.23's Reset: discards a value not yet received (no value from
    /// before is ever received), then re-arms the queued entry if it comes
    /// up no later than the new time, or queues a new generation on the
    /// current P. Returns what `stop` would have.
    pub(crate) fn reset(self: &Arc<Self>, d: std::time::Duration, period: Option<i64>) -> bool {
        // An overflowing `d` (Duration::MAX) is a timer at i64::MAX: it
        // never fires but is pending, as in Go.
        let when = crate::time::when_after(d);
        // A runtime lock, as in `stop`.
        let mut st = crate::m::lock_rt(&self.st);
        let active = self.discard_locked(&st);
        if let Some(p) = period {
            st.period = p;
        }
        st.armed = true;
        st.due = when;
        if self.carrier.covers(&st.c, when) {
            // The queued entry comes up no later than the new time: it
            // carries the new arming and re-queues itself at `due` (fire).
            return active;
        }
        // The old carrier (if any) is stale from here on.
        let gen = self.carrier.next(&mut st.c, when);
        drop(st);
        // The entry is added after `st` is released: adding may purge the
        // heap and drop other timers (and their closures). If a stop or
        // reset slips in between, this entry is simply stale (or, after a
        // later reset, carries it: it re-queues itself).
        crate::time::add_timer(
            when,
            Action::User {
                t: self.clone(),
                gen,
            },
        );
        active
    }

    /// After the carrier fired for good: unarmed, no entry.
    fn disarm_fired(&self, st: &mut TimerState) {
        st.armed = false;
        self.carrier.retire(&mut st.c);
    }

    /// Runs the timer's action for the heap entry of generation `gen` that
    /// came due at `now`, if it is the carrier and the timer is due;
    /// re-queues it on `timers` for a later `due` or a ticker's next tick.
    /// On g0 with a P, or on a thread without one; never on a user G.
    fn fire(self: &Arc<Self>, gen: u64, now: i64, timers: &Timers) {
        let mut st = self.st.lock();
        // Final: under `st`.
        if !self.carrier.is(gen) {
            return; // superseded: reset to an earlier time since
        }
        if !st.armed {
            // Stopped while queued (a zombie): no entry is left.
            self.carrier.retire(&mut st.c);
            return;
        }
        if st.due > now {
            // Reset to a later time while queued: queue again for then.
            let due = st.due;
            Carrier::moved(&mut st.c, due);
            drop(st); // see `reset`: add without holding `st`
            let t = self.clone();
            requeue(timers, due, Action::User { t, gen });
            return;
        }
        match &self.kind {
            Kind::Chan(c) => {
                if !c.has_receivers() {
                    // Nobody can observe it: a ticker stops here.
                    self.disarm_fired(&mut st);
                    return;
                }
                send_time(c);
                if st.period > 0 {
                    let next = next_tick(st.due, now, st.period);
                    st.due = next;
                    Carrier::moved(&mut st.c, next);
                    drop(st); // see `reset`: add without holding `st`
                    let t = self.clone();
                    requeue(timers, next, Action::User { t, gen });
                } else {
                    self.disarm_fired(&mut st);
                }
            }
            Kind::Func(f) => {
                self.disarm_fired(&mut st);
                let f = f.clone();
                drop(st);
                if let Err(e) = crate::proc::spawn_with(move || f(), None, None) {
                    crate::throw::throwf(format_args!("time.AfterFunc: {e}"));
                }
            }
        }
    }
}

/// When a ticker due at `when` and run at `now` fires next (Go:
/// `when + period*(1 + (now-when)/period)`): the first multiple of
/// `period` after `now`, so ticks a slow reader missed are dropped rather
/// than delivered in a burst (the buffer holds one).
fn next_tick(when: i64, now: i64, period: i64) -> i64 {
    when.saturating_add(period.saturating_mul(1 + (now - when) / period))
}

/// Drops a heap entry's reference to a user timer. If it is the last one
/// of an `after_func` timer (stopped, its handle dropped), dropping it runs
/// the user's closure's destructor, which may block on goro objects. Where
/// that cannot park — on g0, where timers run, or inside a runtime critical
/// section (see [`Purged`]) — it is done in a new goroutine. (Racy: if the handle is dropped at the same moment, the
/// destructor may still run here; it then must not park, like any code on
/// g0.)
///
/// A panic in that destructor is contained, in place as in the helper
/// goroutine (whose panic is a goroutine's: reported by the panic hook,
/// caught at its entry): the code that happens to release an unrelated
/// timer is never unwound by it. Before (h41) the in-place drop let it
/// unwind out of whatever added a timer on that goroutine (`Timer::new`,
/// `after`, a socket read's deadline: a read claimed its poll descriptor,
/// unwound, and the socket's next read died with "netpoll: double wait
/// on a poll descriptor"), and two such destructors in one batch aborted.
fn release(t: Arc<TimerCore>) {
    release_all(core::iter::once(t));
}

/// User timers a heap purge removed, released (see [`release_all`]) when
/// this is dropped. Drop it outside any runtime critical section: inside
/// one, every `after_func` closure among them must be dropped in a
/// goroutine. `add_timer` is always called inside one (it holds the P);
/// when it dropped the purged timers there, a server that arms and stops
/// a timeout per request (Go's context.WithTimeout on after_func) spawned
/// a goroutine per timer: 3-4x Go's time and 560-755 MB against Go's 8 MB.
/// The heap entries themselves; only user timers' need releasing.
#[must_use]
pub(crate) struct Purged(Vec<Timer>);

impl Drop for Purged {
    fn drop(&mut self) {
        release_all(self.0.drain(..).filter_map(|t| match t.action {
            Action::User { t, .. } => Some(t),
            _ => None,
        }));
    }
}

/// [`release`] for many timers at once: those whose destructors cannot run
/// here share one goroutine (allocating only if there are any).
fn release_all(ts: impl Iterator<Item = Arc<TimerCore>>) {
    let mut deferred = Vec::new();
    for t in ts {
        // The last reference to an after_func timer, where its closure's
        // destructor may not park.
        if matches!(t.kind, Kind::Func(_))
            && Arc::strong_count(&t) == 1
            && (!crate::park::in_goroutine() || crate::m::in_critical_section())
        {
            deferred.push(t);
        } else {
            drop_contained(t);
        }
    }
    if !deferred.is_empty() {
        // On failure the closures are dropped here anyway (contained).
        let _ = crate::proc::spawn_with(
            move || deferred.into_iter().for_each(drop_contained),
            None,
            None,
        );
    }
}

/// Drops a reference to a user timer; if it is the last one of an
/// `after_func` timer, a panic in the closure's destructor is reported by
/// the panic hook and goes no further (see [`release`]). One at a time, so
/// a second panicking destructor in a batch is not a panic while
/// unwinding (an abort).
fn drop_contained(t: Arc<TimerCore>) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(t)));
}

/// Non-blocking send of the current time on a timer channel (Go's
/// sendTime); a full buffer drops the value (a ticker's slow reader).
fn send_time(c: &Hchan) {
    let now = core::mem::MaybeUninit::new(Instant::now());
    // SAFETY: `c` is a channel of Instant (built by time.rs) and `now` an
    // initialised Instant; Instant is Copy, so whether it is moved out or
    // not nothing needs dropping.
    let _ = unsafe { c.send(now.as_ptr().cast(), false) };
}

// SAFETY: the G pointer is a handle owned by the timer until it fires.
unsafe impl Send for Action {}

struct Timer {
    when: i64,
    seq: u64,
    action: Action,
}

impl Timer {
    fn key(&self) -> (i64, u64) {
        (self.when, self.seq)
    }
}

struct Heap {
    t: Vec<Timer>,
    seq: u64,
    /// Heap size that triggers the next purge of stale timeouts.
    purge_at: usize,
}

/// Smallest heap worth purging of stale timeouts.
const PURGE_MIN: usize = 1024;

impl Timer {
    /// Firing this timer would do nothing: a select/timed-wait timeout
    /// whose wait already completed (its G has moved to another
    /// generation), or a user timer stopped or reset since (an old
    /// generation) or that nobody can observe (its channel has no Receiver
    /// left; Go 1.23 collects such timers too).
    fn is_stale(&self) -> bool {
        match &self.action {
            Action::SelTimeout { gp, seq } => {
                // SAFETY: Gs are never freed and selgen is atomic; a racy
                // read only decides whether to drop a timer whose CAS would fail anyway
                // (generations only grow, so stale stays stale).
                unsafe { (**gp).selgen.load(Ordering::Relaxed) != 2 * seq }
            }
            // A non-carrier stays one; the carrier is judged under the
            // timer's lock (TimerCore::purgeable).
            Action::User { t, gen } => t.purgeable(*gen),
            // Relaxed: as above, a cancelled call stays cancelled.
            Action::Deadline { pd, mode, carrier } => pd.deadline_stale(*mode, *carrier),
            Action::Ready(_) => false,
        }
    }
}

/// Puts back on `timers` an entry that came up early or ticks again (a
/// user timer reset to later, a ticker's next tick, a socket deadline
/// carrier that moves). If it is now the heap's earliest, wakes the
/// netpoller as `time::add_timer` does: the M running these timers may be
/// another P's (stealing), and an M asleep in netpoll may have chosen its
/// deadline while the entry was out of every heap, between its pop and
/// this add (found by h26's review of the deadline carriers).
pub(crate) fn requeue(timers: &Timers, when: i64, action: Action) {
    if timers.add(when, action) {
        crate::sched::wake_netpoller(when);
    }
}

/// A P's timers.
pub(crate) struct Timers {
    heap: Mutex<Heap>,
    /// When the earliest timer fires, 0 if none (Go's p.timer0When). Read
    /// without the lock by any M to decide whether to take it; Relaxed
    /// suffices because a stale value only delays or repeats a check that
    /// is then done under the lock. An M about to block that reads a stale
    /// value is covered by the adder's wake_netpoller, whose fence(SeqCst)
    /// before its `lastpoll`/`poll_until` loads pairs with the fence an M
    /// passes after giving up its P and before it reads the timers: either
    /// that M sees this store, or the adder sees its poll and breaks it
    /// (session 27; without the adder's fence a SeqCst load alone orders
    /// nothing against this Relaxed store: find_runnable_model.rs).
    timer0_when: AtomicI64,
}

impl Timers {
    pub(crate) const fn new() -> Timers {
        Timers {
            heap: Mutex::new(Heap {
                t: Vec::new(),
                seq: 0,
                purge_at: PURGE_MIN,
            }),
            timer0_when: AtomicI64::new(0),
        }
    }

    /// Earliest deadline, 0 if none.
    pub(crate) fn next_when(&self) -> i64 {
        self.timer0_when.load(Ordering::Relaxed)
    }

    /// Adds a timer; returns true if it is now the earliest. User timers
    /// purged on the way are released before returning (see [`Purged`]).
    pub(crate) fn add(&self, when: i64, action: Action) -> bool {
        self.add_purging(when, action).0
    }

    /// [`add`](Timers::add) that hands the user timers it purged to the
    /// caller, to be dropped where it lets go of them: after leaving its
    /// critical section, where `after_func` closures can be dropped in
    /// place rather than in a goroutine.
    pub(crate) fn add_purging(&self, when: i64, action: Action) -> (bool, Purged) {
        // A runtime critical section while the heap lock is held (Go's
        // lock()): never preempted asynchronously with it.
        let ml = crate::m::MLock::new();
        let mut h = self.heap.lock();
        let mut purged = Vec::new();
        if h.t.len() >= h.purge_at {
            // Timeouts of waits that completed early, and user timers that
            // were stopped, reset or dropped, are never deleted eagerly (no
            // cancellation on the hot path); drop them in bulk whenever the
            // heap has doubled, so it stays within about twice the live
            // timers (amortised O(1) per add). Their drops (which may free
            // channels) run after the heap lock is released.
            // In place (the order is rebuilt below): no new heap vector.
            let mut i = 0;
            while i < h.t.len() {
                if h.t[i].is_stale() {
                    purged.push(h.t.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            for i in (0..h.t.len() / 4 + 1).rev() {
                sift_down(&mut h.t, i);
            }
            h.purge_at = (2 * h.t.len()).max(PURGE_MIN);
        }
        h.seq += 1;
        let seq = h.seq;
        h.t.push(Timer { when, seq, action });
        let i = h.t.len() - 1;
        sift_up(&mut h.t, i);
        let first = h.t[0].seq == seq;
        self.timer0_when.store(h.t[0].when, Ordering::Relaxed);
        drop(h);
        drop(ml);
        (first, Purged(purged))
    }

    /// Timers in this heap (live or stale), for tests and introspection.
    pub(crate) fn len(&self) -> usize {
        self.heap.lock().t.len()
    }

    /// Pops the earliest timer if it is due at `now`.
    fn pop_due(&self, now: i64) -> Option<Timer> {
        let mut h = self.heap.lock();
        if h.t.is_empty() || h.t[0].when > now {
            return None;
        }
        let last = h.t.len() - 1;
        h.t.swap(0, last);
        let t = h.t.pop();
        if !h.t.is_empty() {
            sift_down(&mut h.t, 0);
        }
        let w = h.t.first().map_or(0, |t| t.when);
        self.timer0_when.store(w, Ordering::Relaxed);
        t
    }

    /// Moves every timer of `self` into `to` (Go's moveTimers, for a P
    /// destroyed by procresize). Drops nothing: the entries are pushed
    /// without the bulk purge an `add` may run. procresize holds
    /// `sched.lock`, and a purge releases the timers it removes, which for
    /// an `after_func` timer's last reference outside a goroutine spawns
    /// one, and a spawn from a plain thread queues it globally under
    /// `sched.lock`: `set_max_procs` shrinking from a plain thread hung
    /// the whole runtime when the move filled P 0's heap to its purge mark
    /// (found by h29). `to`'s next add purges instead.
    pub(crate) fn move_all(&self, to: &Timers) {
        let ts = std::mem::take(&mut self.heap.lock().t);
        // Relaxed: as in `pop_due` (a stale value only delays a check).
        self.timer0_when.store(0, Ordering::Relaxed);
        if ts.is_empty() {
            return;
        }
        let mut h = to.heap.lock();
        for t in ts {
            h.seq += 1;
            let seq = h.seq;
            h.t.push(Timer {
                when: t.when,
                seq,
                action: t.action,
            });
            let i = h.t.len() - 1;
            sift_up(&mut h.t, i);
        }
        // Relaxed: as in `add_purging`; the world restarts after this.
        to.timer0_when.store(h.t[0].when, Ordering::Relaxed);
    }

    /// Go's checkTimers: runs all due timers. Returns (now, when the next
    /// timer fires or 0, whether any ran). `now` = 0 means "read the clock".
    pub(crate) fn check(&self, mut now: i64) -> (i64, i64, bool) {
        let next = self.next_when();
        if next == 0 {
            return (now, 0, false);
        }
        if now == 0 {
            now = crate::os::nanotime();
        }
        if now < next {
            return (now, next, false);
        }
        let mut ran = false;
        while let Some(t) = self.pop_due(now) {
            ran = true;
            match t.action {
                Action::Ready(gp) => crate::park::goready(gp),
                Action::SelTimeout { gp, seq } => {
                    // SAFETY: Gs are never freed; the CAS decides ownership.
                    let g = unsafe { &*gp };
                    // AcqRel: winning makes us the G's only waker.
                    if g.selgen
                        .compare_exchange(2 * seq, 2 * seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        // Relaxed: goready publishes it (G::param).
                        g.param.store(0, Ordering::Relaxed);
                        crate::park::goready(gp);
                    }
                }
                Action::User { t: core, gen } => {
                    core.fire(gen, now, self);
                    release(core);
                }
                Action::Deadline { pd, mode, carrier } => {
                    crate::netpoll::deadline_carrier_fired(pd, mode, carrier, now, self);
                }
            }
        }
        (now, self.next_when(), ran)
    }
}

fn sift_up(t: &mut [Timer], mut i: usize) {
    while i > 0 {
        let p = (i - 1) / 4;
        if t[i].key() >= t[p].key() {
            break;
        }
        t.swap(i, p);
        i = p;
    }
}

fn sift_down(t: &mut [Timer], mut i: usize) {
    let n = t.len();
    loop {
        let c = 4 * i + 1;
        if c >= n {
            break;
        }
        let mut m = c;
        for j in c + 1..(c + 4).min(n) {
            if t[j].key() < t[m].key() {
                m = j;
            }
        }
        if t[m].key() >= t[i].key() {
            break;
        }
        t.swap(i, m);
        i = m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_tick_skips_missed_ticks() {
        // On time, or late by less than a period: one period on.
        assert_eq!(next_tick(100, 100, 100), 200);
        assert_eq!(next_tick(100, 199, 100), 200);
        // Late by 9.5 periods: the 9 missed ticks are dropped.
        assert_eq!(next_tick(100, 1050, 100), 1100);
        assert_eq!(next_tick(1_000, 1_000 + 3 * 7 + 1, 7), 1_000 + 4 * 7);
        // Saturates rather than wrapping.
        assert_eq!(next_tick(i64::MAX - 5, i64::MAX - 5, 100), i64::MAX);
    }

    #[test]
    fn stale_timeouts_are_purged_and_live_ones_kept() {
        let live_g = crate::g::G::alloc(None);
        let stale_g = crate::g::G::alloc(None);
        // SAFETY: fresh Gs (never freed) used only as generation words here.
        let (lg, sg) = unsafe { (&*live_g, &*stale_g) };
        let timers = Timers::new();
        // 2,000 live waits first (more than PURGE_MIN, so they sit in the
        // heap through every purge below), due in scrambled order, and
        // ready timers (never stale).
        const LIVE: i64 = 2_000;
        let live_seq = 7u64;
        lg.selgen.store(2 * live_seq, Ordering::Relaxed);
        let ready_g = crate::g::G::alloc(None);
        for i in 0..LIVE {
            let when = 1_000 + (i * 7919) % LIVE;
            if i % 2 == 0 {
                timers.add(
                    when,
                    Action::SelTimeout {
                        gp: live_g,
                        seq: live_seq,
                    },
                );
            } else {
                timers.add(when, Action::Ready(ready_g));
            }
        }
        // 20,000 timed waits that completed before their timeout (the G's
        // generation moved past each one), due among the live ones:
        // purging them takes entries from all over the heap, which must
        // then be rebuilt.
        for seq in 1..=10_000u64 {
            sg.selgen.store(2 * (2 * seq) + 1, Ordering::Relaxed);
            let when = 1_000 + (seq as i64 * 31) % (2 * LIVE);
            timers.add(
                when,
                Action::SelTimeout {
                    gp: stale_g,
                    seq: 2 * seq - 1,
                },
            );
            timers.add(
                when + 1,
                Action::SelTimeout {
                    gp: stale_g,
                    seq: 2 * seq,
                },
            );
        }
        // Purged whenever the heap doubled past the live ones.
        let n = timers.len();
        assert!(
            n <= 2 * LIVE as usize + 2,
            "stale timeouts kept: {n} timers"
        );
        // Every live entry survived, and everything comes out in deadline
        // order (the heap was rebuilt correctly after each purge).
        let (mut whens, mut live) = (Vec::new(), 0);
        let heap_ok = |timers: &Timers| {
            let h = timers.heap.lock();
            (1..h.t.len()).all(|i| h.t[(i - 1) / 4].key() <= h.t[i].key())
        };
        assert!(heap_ok(&timers), "heap order broken by a purge");
        while let Some(t) = timers.pop_due(i64::MAX) {
            if whens.len() % 64 == 0 {
                assert!(heap_ok(&timers), "heap order broken by pop");
            }
            whens.push(t.when);
            live += usize::from(match t.action {
                Action::SelTimeout { gp, .. } => gp == live_g,
                Action::Ready(gp) => gp == ready_g,
                _ => false,
            });
        }
        assert_eq!(live, LIVE as usize, "live timeouts were purged");
        assert!(whens.windows(2).all(|w| w[0] <= w[1]), "heap order broken");
        assert_eq!(timers.next_when(), 0);
    }

    #[test]
    fn unobservable_and_stale_user_timers_are_purged() {
        let timers = Timers::new();
        // A live timer: its Receiver is kept.
        let (c, live_rx) = crate::chan::senderless::<Instant>(1);
        let live = TimerCore::new(Kind::Chan(c), 0);
        live.carrier.gen.store(0, Ordering::Relaxed);
        live.st.lock().armed = true;
        timers.add(
            1_000,
            Action::User {
                t: live.clone(),
                gen: 0,
            },
        );
        // 10,000 timers whose only Receiver was dropped, and 10,000 stale
        // generations of one timer (stopped/reset since).
        let stale = {
            let (c, _rx) = crate::chan::senderless::<Instant>(1);
            TimerCore::new(Kind::Chan(c), 0)
        };
        let kept_rx = {
            let (c, rx) = crate::chan::senderless::<Instant>(1);
            let t = TimerCore::new(Kind::Chan(c), 0);
            for gen in 0..10_000u64 {
                t.carrier.gen.store(gen + 1, Ordering::Relaxed);
                timers.add(i64::MAX - 1, Action::User { t: t.clone(), gen });
            }
            rx
        };
        for _ in 0..10_000 {
            let (c, rx) = crate::chan::senderless::<Instant>(1);
            drop(rx);
            timers.add(
                i64::MAX - 1,
                Action::User {
                    t: TimerCore::new(Kind::Chan(c), 0),
                    gen: 0,
                },
            );
        }
        let n = timers.len();
        assert!(
            n < 2 * PURGE_MIN,
            "unobservable/stale user timers kept: {n}"
        );
        assert_eq!(timers.next_when(), 1_000, "the live timer must survive");
        drop((stale, kept_rx, live_rx));
        timers.heap.lock().t.clear();
    }

    #[test]
    fn heap_orders_by_when_then_seq() {
        let mut v = Vec::new();
        let whens = [50, 10, 40, 10, 30, 20, 60, 5, 5, 70, 1];
        for (seq, &w) in whens.iter().enumerate() {
            v.push(Timer {
                when: w,
                seq: seq as u64,
                action: Action::Ready(core::ptr::null_mut()),
            });
            let i = v.len() - 1;
            sift_up(&mut v, i);
        }
        let mut out = Vec::new();
        while !v.is_empty() {
            let last = v.len() - 1;
            v.swap(0, last);
            let t = v.pop().unwrap();
            if !v.is_empty() {
                sift_down(&mut v, 0);
            }
            out.push(t.key());
        }
        let mut sorted = out.clone();
        sorted.sort();
        assert_eq!(out, sorted);
    }
}
