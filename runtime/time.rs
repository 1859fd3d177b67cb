//! Time: `sleep`, `after`, `tick`, `Timer`, `Ticker`, `after_func` (Go's
//! time package), all built on the per-P timers (timer.rs). Sleeping parks
//! the goroutine, never the OS thread; outside a goroutine it blocks the
//! calling thread.
//!
//! Timers follow Go 1.23 (time/sleep.go, runtime/time.go): timer channels
//! are never closed; `stop`/`reset` discard a value sent but not received,
//! so none from before the call is ever received; and a timer nobody can
//! observe any more is collected before it fires. Each user timer is a
//! shared `TimerCore` with a generation: `stop`/`reset` bump it, which makes
//! entries already in a heap stale; stale and unobservable entries are
//! dropped when they come due or in the heap's bulk purge (timer.rs).

use crate::chan::{senderless, Receiver};
use crate::g::G;
use crate::timer::{Action, Kind, TimerCore};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Monotonic deadline `d` from now in ns, or None if it overflows (never).
pub(crate) fn deadline_after(d: Duration) -> Option<i64> {
    let ns = i64::try_from(d.as_nanos()).ok()?;
    crate::os::nanotime().checked_add(ns)
}

/// Go's `when(d)`: the monotonic time `d` from now in ns, saturating at
/// `i64::MAX` (a timer that never fires, but is pending: a goroutine
/// waiting for it is asleep, not deadlocked).
pub(crate) fn when_after(d: Duration) -> i64 {
    deadline_after(d).unwrap_or(i64::MAX)
}

/// The deadline of a channel wait with timeout `d` (`recv_timeout`,
/// `select!`'s `default(d)`, ...): always `Some`; an overflowing `d` gives
/// `i64::MAX`, a timer that is pending but never fires, as Go's
/// `time.After(d)` case is. A goroutine waiting so is asleep, not
/// deadlocked (docs/API.md); before session 30 such a wait armed no timer
/// and the deadlock check reported it (h41).
pub(crate) fn timeout_deadline(d: Duration) -> Option<i64> {
    Some(when_after(d))
}

/// Adds a timer to the current P (or P 0 from a thread without one) and
/// makes sure an M will wake for it (Go's addtimer + wakeNetPoller).
pub(crate) fn add_timer(when: i64, action: Action) {
    crate::ensure_started();
    let (mp, pp) = crate::park::acquirem_p();
    let ml = crate::m::MLock::of(mp);
    let timers = if pp.is_null() {
        &crate::sched::allp(0).timers
    } else {
        // SAFETY: we hold pp.
        unsafe { &(*pp).timers }
    };
    let (first, purged) = timers.add_purging(when, action);
    if first {
        crate::sched::wake_netpoller(when);
    }
    // Timers the add purged are dropped out of the critical section: on a
    // goroutine, their after_func closures are then dropped in place.
    drop(ml);
    drop(purged);
}

fn sleep_commit(gp: *mut G, when: *mut u8) -> bool {
    add_timer(when as usize as i64, Action::Ready(gp));
    true
}

/// Parks the calling goroutine for at least `d` (Go's time.Sleep); other
/// goroutines run on its M meanwhile. Outside a goroutine, sleeps the
/// thread. A zero `d` returns at once without yielding (Go). `Duration::MAX`
/// (or any overflowing duration) parks forever.
pub fn sleep(d: Duration) {
    if d.is_zero() {
        return;
    }
    if !crate::park::in_goroutine() {
        match deadline_after(d) {
            Some(_) => std::thread::sleep(d),
            None => loop {
                std::thread::park();
            },
        }
        return;
    }
    // Duration::MAX parks on a timer at i64::MAX, as in Go: asleep (the
    // deadlock check counts it as waiting for time), never woken.
    crate::park::gopark(
        Some(sleep_commit),
        when_after(d) as usize as *mut u8,
        crate::waitreason::WaitReason::Sleep,
    );
}

/// Ticker period in ns for `d` (non-zero: callers check): at least 1 ns,
/// `i64::MAX` if it overflows.
fn period_of(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX).max(1)
}

/// A channel that receives the current time once, after `d` (Go's
/// time.After). Never blocks. The channel has one buffer slot and is never
/// closed, so a second `recv` blocks for ever (as in Go); an overflowing
/// `d` (e.g. `Duration::MAX`) never fires. Its `len` and `capacity` show
/// that slot (1), where Go 1.23's `len` and `cap` of a timer channel read
/// 0: a poll of `is_empty` sees the value, which `stop` and `reset` may
/// still discard.
///
/// Go 1.23: once every Receiver of the channel is dropped, nothing can
/// observe the timer and it is released before it fires (lazily, when its
/// P's timer heap next purges stale entries), so abandoned `after(1h)`
/// timeouts do not accumulate.
pub fn after(d: Duration) -> Receiver<Instant> {
    let t = Timer::new(d);
    t.rx.expect("a channel timer has its channel")
}

/// A channel that receives the time every `d` (Go's time.Tick): one buffer
/// slot, first tick after one period, ticks dropped for slow readers. The
/// ticker stops once every Receiver is dropped (Go 1.23 collects it too).
/// A zero `d` gives a channel that never receives (Go returns a nil
/// channel, which blocks for ever); an overflowing `d` never ticks.
pub fn tick(d: Duration) -> Receiver<Instant> {
    if d.is_zero() {
        return crate::chan::never();
    }
    let t = Ticker::new(d);
    t.rx
}

/// Panics for a zero ticker period, with Go's message. Before session 25 a
/// zero period meant 1 ns: a ticker built from a configuration value of 0
/// fired without pause and kept a CPU busy even with nobody reading it
/// (h14).
#[track_caller]
fn check_period(d: Duration, what: &str) {
    if d.is_zero() {
        panic!("non-positive interval for {what}");
    }
}

/// A single-event timer (Go's time.Timer from time.NewTimer): after its
/// duration the current time is sent on [`receiver`](Timer::receiver), or,
/// for [`after_func`], a function runs in a new goroutine.
///
/// Go 1.23 semantics: after [`stop`](Timer::stop) or
/// [`reset`](Timer::reset) returns, no value from before the call is ever
/// received; the channel is never closed; a timer whose handle and
/// receivers are all dropped is released without firing (an `after_func`
/// timer still runs its function). The timer lives on a per-P timer heap.
///
/// ```
/// use std::time::Duration;
/// goro::run(|| {
///     let t = goro::time::Timer::new(Duration::from_secs(3600));
///     assert!(t.stop()); // stopped before it fired
///     assert!(!t.reset(Duration::from_millis(1))); // it was not active
///     t.receiver().recv().unwrap(); // fires 1 ms after the reset
/// });
/// ```
pub struct Timer {
    core: Arc<TimerCore>,
    /// The timer's channel; None for an [`after_func`] timer, whose
    /// `receiver()` is the shared [`FUNC_TIMER_RX`].
    rx: Option<Receiver<Instant>>,
}

/// What every [`after_func`] timer's `receiver()` returns (Go: its `C` is
/// nil): one never-receiving channel for all of them, not one each (a
/// channel is ~200 bytes; programs keep 100,000s of idle-connection
/// timers, h20's idletimers).
static FUNC_TIMER_RX: std::sync::LazyLock<Receiver<Instant>> =
    std::sync::LazyLock::new(crate::chan::never);

impl Timer {
    /// A timer that sends the current time on its channel after `d` (Go's
    /// time.NewTimer). Never blocks; an overflowing `d` never fires.
    pub fn new(d: Duration) -> Timer {
        let (c, rx) = senderless::<Instant>(1);
        let core = TimerCore::new(Kind::Chan(c), 0);
        core.reset(d, None);
        Timer { core, rx: Some(rx) }
    }

    /// The channel on which the time is delivered (Go's `t.C`). For an
    /// [`after_func`] timer, a channel that never receives. Never blocks
    /// (receiving on it does).
    pub fn receiver(&self) -> &Receiver<Instant> {
        self.rx.as_ref().unwrap_or(&FUNC_TIMER_RX)
    }

    /// Waits for the timer's value (Go's `<-t.C`): the same as
    /// `receiver().recv()`, whose channel is never closed. Parks the
    /// goroutine (blocks a plain thread) until the timer fires; forever
    /// if it was stopped, or for an [`after_func`] timer.
    pub fn recv(&self) -> Instant {
        recv_never_closed(self.receiver())
    }

    /// Prevents the timer from firing (Go's Timer.Stop). Returns `true` if
    /// this call stopped it: it was armed, or it had fired but its value
    /// was not received yet (that value is discarded; Go 1.23). Returns
    /// `false` if it had already been received, run (`after_func`) or
    /// stopped. Never blocks for long (takes the timer's lock); for
    /// `after_func`, `false` means `f` has been started in its goroutine,
    /// which `stop` does not wait for.
    pub fn stop(&self) -> bool {
        self.core.stop()
    }

    /// Changes the timer to fire after `d` from now (Go's Timer.Reset).
    /// Returns what [`stop`](Timer::stop) would have returned; after it
    /// returns no value from before the call is received. Also re-arms an
    /// `after_func` timer that already ran. An overflowing `d` never fires.
    pub fn reset(&self, d: Duration) -> bool {
        self.core.reset(d, None)
    }
}

impl Timer {
    /// Test hook (not public API): observes whether the timer's state has
    /// been released.
    #[doc(hidden)]
    pub fn __watch(&self) -> TimerWatch {
        TimerWatch(Arc::downgrade(&self.core))
    }
}

impl Ticker {
    /// Test hook (not public API): observes whether the ticker's state has
    /// been released (it stopped and nothing refers to it).
    #[doc(hidden)]
    pub fn __watch(&self) -> TimerWatch {
        TimerWatch(Arc::downgrade(&self.core))
    }
}

/// Test hook (not public API): a weak reference to a timer's state.
#[doc(hidden)]
#[derive(Debug)]
pub struct TimerWatch(std::sync::Weak<TimerCore>);

impl TimerWatch {
    /// Whether the timer's state has been freed: no handle and no heap
    /// entry refer to it any more.
    pub fn is_released(&self) -> bool {
        self.0.strong_count() == 0
    }

    /// References to the timer's state: its handle (while it lives) plus
    /// one per timer-heap entry (live or stale) queued for it.
    pub fn refs(&self) -> usize {
        self.0.strong_count()
    }
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

/// Calls `f` in a new goroutine after `d` (Go's time.AfterFunc). The
/// returned [`Timer`] can [`stop`](Timer::stop) it before it runs or
/// [`reset`](Timer::reset) it (to run `f` again); dropping the Timer does
/// not cancel it. Its receiver never receives. Never blocks. `f` is `Fn`
/// because a reset timer may run it more than once, as in Go.
///
/// `f` itself is dropped with the last of the handle and the timer's heap
/// entry: a stopped timer whose handle is gone is released later, by
/// whichever goroutine's timer operation purges its heap (or by a helper
/// goroutine). A panic in `f`'s destructor there is reported as a
/// goroutine's panic and goes no further.
///
/// If the goroutine cannot be created when the timer fires (its stack
/// cannot be mapped), the process aborts with a fatal error, as Go does
/// when it runs out of memory.
pub fn after_func<F>(d: Duration, f: F) -> Timer
where
    F: Fn() + Send + Sync + 'static,
{
    let core = TimerCore::new(Kind::Func(Arc::new(f)), 0);
    core.reset(d, None);
    Timer { core, rx: None }
}

/// A ticker (Go's time.Ticker from time.NewTicker): sends the current time
/// on [`receiver`](Ticker::receiver) every period, the first after one
/// period; one buffer slot, ticks a slow reader misses are dropped.
///
/// Go 1.23 semantics: after [`stop`](Ticker::stop) or
/// [`reset`](Ticker::reset) returns, no tick from before the call is ever
/// received; the channel is never closed; a ticker whose handle and
/// receivers are all dropped stops by itself (no explicit `stop` needed).
pub struct Ticker {
    core: Arc<TimerCore>,
    rx: Receiver<Instant>,
}

impl Ticker {
    /// A ticker with period `d` (Go's time.NewTicker); an overflowing `d`
    /// never ticks. Never blocks.
    ///
    /// Panics if `d` is zero ("non-positive interval for NewTicker", as Go;
    /// tokio's `interval` panics too): such a ticker would fire without
    /// pause. [`tick`] with a zero `d` returns a channel that never
    /// receives instead.
    #[track_caller]
    pub fn new(d: Duration) -> Ticker {
        check_period(d, "NewTicker");
        let (c, rx) = senderless::<Instant>(1);
        let core = TimerCore::new(Kind::Chan(c), period_of(d));
        core.reset(d, None);
        Ticker { core, rx }
    }

    /// The channel on which ticks are delivered (Go's `t.C`). Never blocks
    /// (receiving on it does).
    pub fn receiver(&self) -> &Receiver<Instant> {
        &self.rx
    }

    /// Waits for the next tick (Go's `<-t.C`): the same as
    /// `receiver().recv()`, whose channel is never closed. Parks the
    /// goroutine (blocks a plain thread) until a tick is delivered; a tick
    /// already buffered is returned at once; forever after `stop`.
    pub fn recv(&self) -> Instant {
        recv_never_closed(&self.rx)
    }

    /// Turns the ticker off (Go's Ticker.Stop); a buffered tick is
    /// discarded. The channel is not closed. Never blocks for long.
    pub fn stop(&self) {
        self.core.stop();
    }

    /// Stops the ticker and restarts it with period `d` (Go's
    /// Ticker.Reset); the next tick arrives after `d`. Never blocks for
    /// long (takes the timer's lock).
    ///
    /// Panics if `d` is zero ("non-positive interval for Ticker.Reset", as
    /// Go); the ticker is left as it was.
    #[track_caller]
    pub fn reset(&self, d: Duration) {
        check_period(d, "Ticker.Reset");
        self.core.reset(d, Some(period_of(d)));
    }
}

// No user code runs while a timer's lock is held, so a panic cannot leave
// a timer half-updated: the handles are unwind-safe, like channel ends.
impl std::panic::UnwindSafe for Timer {}
impl std::panic::RefUnwindSafe for Timer {}
impl std::panic::UnwindSafe for Ticker {}
impl std::panic::RefUnwindSafe for Ticker {}

impl std::fmt::Debug for Ticker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticker").finish_non_exhaustive()
    }
}

/// `rx.recv()` on a timer's channel, which has no `Sender` to close it.
fn recv_never_closed(rx: &Receiver<Instant>) -> Instant {
    rx.recv().expect("a timer's channel is never closed")
}

/// The current time as seen by the runtime's timers: `Instant::now()`,
/// CLOCK_MONOTONIC with ns resolution. Go's `time.Now` (its monotonic
/// reading). Never blocks.
pub fn now() -> Instant {
    Instant::now()
}
