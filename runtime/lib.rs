//! goro: Go's GMP scheduler for Rust.
//!
//! Goroutines are stackful coroutines on mmap'd, guard-paged stacks,
//! switched by hand-written assembly (`asm/`); Ms (OS threads) run them on
//! Ps (processors) with Go's run queues, work stealing and spinning-M
//! protocol; channels, select, timers and joins park goroutines, not threads.
//!
//! ```
//! let (tx, rx) = goro::chan::<u64>(0);
//! let sum = goro::run(move || {
//!     goro::go!(move || for i in 1..=10 { tx.send(i).unwrap(); });
//!     rx.iter().sum::<u64>()
//! });
//! assert_eq!(sum, 55);
//! ```
//!
//! # Map of the modules (lower layers first)
//! - leaves: `arch` (Gobuf, gogo, mcall; asm/*.S), `stack` (arenas,
//!   guard pages, reuse), `os` (futex, clocks), `throw` (fatal errors),
//!   `atomic` (relaxed cells for racily read fields).
//! - objects: `g` (G and its statuses), `m` (M, g0, the current-M
//!   thread-local, acquirem/releasem), `p` (P), `runq` (the lock-free
//!   local run queue).
//! - scheduler: `sched` (schedule, findRunnable, stealing, wakep/startm/
//!   stopm/handoffp, stop-the-world), `park` (gopark/goready, Gosched,
//!   goexit), `proc` (newproc, JoinHandle), `timer` (per-P heaps),
//!   `netpoll` (poll descriptors, epoll wait/break), `signal_unix`
//!   (guard-page faults, the SIGURG handler), `preempt` (async
//!   preemption, pinned and migrating modes, blocking detection), `sysmon`
//!   (retake), `shrink` (stack shrinking), `syscall`
//!   (entersyscall/exitsyscall).
//! - user-facing: `sudog` (wait queues), `chan`, `select`, `time`,
//!   `sema` (Go's semaphore table: waiters keyed by address), `sync`
//!   (Mutex, RwLock, WaitGroup, Once, Cond, Semaphore on sema), `local`
//!   (`goroutine_local!`), `scope` (scoped goroutines), `context` (Go's
//!   context), `errgroup` (x/sync/errgroup), `signal` (Go's os/signal),
//!   `net` (TCP/UDP/Unix sockets on the netpoller's poll descriptors),
//!   `io` (Go's io.Copy over them).
//! - observability (docs/OBSERVABILITY.md): `waitreason` (Go's wait
//!   reasons, recorded by gopark), `dump` (goroutine dump, SIGQUIT),
//!   `deadlock` (Go's checkdead), `trace` (Chrome trace-event JSON),
//!   `block_on` (Futures in goroutines).
//!
//! # Thread affinity (read this if you use thread-locals)
//! A goroutine may resume on a different OS thread after any switch point:
//! channel operations (`try_*` included), `select!`, `time::sleep`,
//! `yield_now`, `join`, `spawn`, `blocking` and `exit_syscall`, the
//! `goro::sync` waits (`Mutex::lock`, `RwLock::read`/`write`, `Cond::wait`,
//! `WaitGroup::wait`, `Once::call_once`, `Semaphore::acquire`), `goro::net`
//! I/O (reads, writes, accept, connect) and `block_on`. Do not hold a
//! `thread_local!` borrow, a std `MutexGuard` or std's stdout lock across
//! those calls. LLVM may cache a thread-local's address within one
//! function; goro reads its own thread-local only through assembly
//! routines (asm/) for that reason. errno is such a thread-local, and LLVM
//! treats `__errno_location` as pure: read errno right after the failing
//! libc call (as std's wrappers do), never after a switch point in the
//! same function. Asynchronous preemption (a goroutine interrupted at any
//! instruction after its time slice, 10 ms by default) does not move it:
//! by default it resumes on its own thread ([`PreemptMode::Pinned`];
//! docs/PREEMPTION.md).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod arch;
mod atomic;
mod block_on;
mod chan;
mod deadlock;
// loom model of the socket deadline carrier (docs/TESTING.md, "Model
// tests").
#[cfg(all(test, goro_loom))]
mod deadline_model;
mod dump;
// loom model of find_runnable's blocking poll and the timer wake-ups
// (docs/TESTING.md, "Model tests").
#[cfg(all(test, goro_loom))]
mod find_runnable_model;
mod g;
// loom model of the socket direction lock (net/iolock.rs; docs/TESTING.md,
// "Model tests").
#[cfg(all(test, goro_loom))]
mod iolock_model;
mod local;
mod lock_futex;
// The runner the loom models share.
#[cfg(all(test, goro_loom))]
mod loom_explore;
mod m;
mod netpoll;
#[cfg(all(test, goro_loom))]
mod netpoll_model;
mod os;
mod p;
mod park;
mod preempt;
mod proc;
mod runq;
mod sched;
mod scope;
mod select;
mod sema;
mod shrink;
// loom models of the semaphore's wake-up and handoff, of the spinning-M
// protocol and of the netpoller's poll descriptors (docs/TESTING.md,
// "Model tests").
#[cfg(all(test, goro_loom))]
mod sema_model;
mod signal_unix;
#[cfg(all(test, goro_loom))]
mod spinning_model;
mod stack;
mod sudog;
mod syscall;
mod sysmon;
mod throw;
mod timer;
mod waitreason;

pub mod context;
pub mod errgroup;
pub mod io;
pub mod net;
pub mod signal;
pub mod sync;
pub mod time;
pub mod trace;

pub use block_on::block_on;
pub use chan::{
    chan, never, IntoIter, Iter, Receiver, RecvError, RecvTimeoutError, SendError,
    SendTimeoutError, Sender, TryIter, TryRecvError, TrySendError,
};
pub use dump::dump;
pub use local::{AccessError, LocalKey};
pub use preempt::PreemptMode;
pub use proc::{spawn, Builder, JoinHandle};
pub use sched::MAX_PROCS;
pub use scope::{scope, Scope, ScopedJoinHandle};
pub use select::{select_recv, select_recv_timeout, try_select_recv, Select, SelectedOperation};
pub use stack::{MAX_POOLED_STACK_SIZE, MAX_STACK_SIZE, MIN_STACK_SIZE};
pub use syscall::{blocking, enter_syscall, enter_syscall_block, exit_syscall, SyscallGuard};

/// Spawns a goroutine: `go!(|| ...)` or `go!(move || ...)` (a trailing
/// comma is accepted). Same as [`spawn`]; returns its [`JoinHandle`].
#[macro_export]
macro_rules! go {
    ($f:expr $(,)?) => {
        $crate::spawn($f)
    };
}

/// Runtime configuration, read once when the runtime starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Number of Ps (GOMAXPROCS), 1..=MAX_PROCS.
    pub max_procs: usize,
    /// Default stack reservation per goroutine in bytes (guard excluded;
    /// rounded up to pages). Default 256 KiB; at least 64 KiB. Not a
    /// thread's 2 MiB: each parked goroutine would then cost a page-table
    /// page (4 KiB) on top of its stack page; 256 KiB is the largest
    /// reservation that keeps a parked goroutine within 5 KiB (measured in
    /// docs/DESIGN.md, "Stacks").
    pub stack_size: usize,
    /// Asynchronous preemption (Go's SIGURG preemption): a goroutine that
    /// has run for more than its time slice ([`Config::time_slice`],
    /// default 10 ms) while others wait, and then for up to 1 ms more of
    /// CPU time without reaching a check point, is interrupted even in a
    /// loop without runtime calls. Default on; `GODEBUG=asyncpreemptoff=1`
    /// turns it off (then such loops starve their P, as in Go ≤ 1.13).
    /// See docs/PREEMPTION.md.
    pub preempt: bool,
    /// Where an asynchronously preempted goroutine resumes: on its own
    /// thread ([`PreemptMode::Pinned`], default, sound for thread-affine
    /// state) or anywhere ([`PreemptMode::Migrate`], Go's behaviour).
    /// `GODEBUG=goropreempt=migrate` selects the latter.
    pub preempt_mode: PreemptMode,
    /// Pinned mode: most OS threads that may sleep at once holding a
    /// preempted goroutine's place (default 256). At the limit async
    /// preemption is refused until one resumes.
    pub preempt_pinned_max: usize,
    /// How long a goroutine may run while others wait before sysmon
    /// preempts it (Go's forcePreemptNS, 10 ms). At least 100 µs.
    /// sysmon learns when a slice began at its next tick, so a preemption
    /// can come up to one more slice late (as in Go) the first time, and
    /// within about a quarter of a slice while sysmon has preempted
    /// something in the last 100 ms (docs/PREEMPTION.md).
    /// `GODEBUG=gorotimeslice=US` sets it in microseconds.
    pub time_slice: std::time::Duration,
    /// Blocking detection: sysmon notices a goroutine blocked in the kernel
    /// without [`enter_syscall`] (a bare `std::thread::sleep`, a blocking
    /// read) and hands its P to another thread, as if the call had been
    /// guarded. Default on; needs /proc (see [`Stats::detect_unavailable`]).
    /// `GODEBUG=gorodetect=0` turns it off.
    pub detect_blocking: bool,
    /// GODEBUG=schedtrace=MS: print a SCHED line every MS ms (0 = off).
    pub schedtrace_ms: usize,
    /// GODEBUG=scheddetail=1.
    pub scheddetail: bool,
    /// Deadlock detection (Go's checkdead): when every goroutine is
    /// blocked on goro objects and nothing can wake one, print
    /// `fatal error: all goroutines are asleep - deadlock!` with every
    /// goroutine and exit with status 2. Never reports while any other
    /// thread could act (see docs/OBSERVABILITY.md). Default on;
    /// `GODEBUG=gorodeadlock=0` turns it off.
    pub deadlock_detection: bool,
    /// SIGQUIT prints a goroutine dump ([`dump`]) to stderr and exits with
    /// status 2, like Go. Default off; `GOTRACEBACK=all` (or `system`,
    /// `crash`, or a numeric level of 1 or more) turns it on. The handler
    /// is installed only when on.
    pub dump_on_sigquit: bool,
    /// Go's `GOTRACEBACK=crash`: the fatal reports that otherwise end the
    /// process with exit status 2 (the SIGQUIT dump, the deadlock report)
    /// end it with SIGABRT instead, after printing the same text, so that
    /// the system can keep a core dump (subject to `ulimit -c`). Runtime
    /// throws (`fatal error: …` for a broken invariant) abort either way.
    /// Default off; `GOTRACEBACK=crash` turns it on, and with it
    /// [`dump_on_sigquit`](Config#structfield.dump_on_sigquit).
    pub crash_on_fatal: bool,
    /// Test knob, not API: `GODEBUG=gorosysmonrescue=0` turns off sysmon's
    /// rescue of stranded runnable Gs and overdue timers, so that a lost
    /// wake-up in the spinning protocol hangs instead of costing ~10 ms
    /// (tests/proc.rs runs its wake-up tests in child processes with it).
    #[doc(hidden)]
    pub sysmon_rescue: bool,
    /// Test knob, not API: `GODEBUG=gorofindrunnabledelay=N` makes an M
    /// that found no work wait N µs after choosing its netpoll deadline and
    /// before electing itself the poller, widening the window in which a
    /// timer added meanwhile must be caught by a poller break
    /// (tests/proc.rs `poller_break_for_later_timer_no_rescue`). 0 (the
    /// default): off.
    #[doc(hidden)]
    pub findrunnable_delay_us: u64,
    /// Test knob, not API: `GODEBUG=goroasynconly=1` has preemption
    /// requests honoured only asynchronously: the check points at runtime
    /// entries ignore them, and sysmon signals with the flag, without its
    /// grace. Async preemption then lands inside goro's inlined runtime
    /// code as often as anywhere, which is what the migrate-mode soundness
    /// tests need (tests/preempt.rs).
    #[doc(hidden)]
    pub async_preempt_only: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_procs: os::ncpu().clamp(1, MAX_PROCS),
            stack_size: 256 << 10,
            preempt: true,
            preempt_mode: PreemptMode::Pinned,
            preempt_pinned_max: 256,
            detect_blocking: true,
            time_slice: std::time::Duration::from_millis(10),
            schedtrace_ms: 0,
            scheddetail: false,
            deadlock_detection: true,
            dump_on_sigquit: false,
            crash_on_fatal: false,
            sysmon_rescue: true,
            findrunnable_delay_us: 0,
            async_preempt_only: false,
        }
    }
}

impl Config {
    /// Defaults overridden by the environment (docs/API.md, "Environment"):
    /// `GOMAXPROCS=N` (invalid or zero values are ignored, as in Go; values
    /// above [`MAX_PROCS`] are clamped), `GOTRACEBACK=all|system|crash` or
    /// a level of 1 or more (turns on `dump_on_sigquit`; `crash` also
    /// `crash_on_fatal`), and the `GODEBUG`
    /// keys `schedtrace=MS`, `scheddetail=1`, `asyncpreemptoff=1`,
    /// `goropreempt=migrate|pinned`, `gorotimeslice=US` (at least 100),
    /// `goropinnedmax=N` (at least 1), `gorodetect=0` and `gorodeadlock=0`.
    /// Unparsable or out-of-range values are ignored, so the result always
    /// validates. The integer keys read as Go's: `asyncpreemptoff` is on
    /// for any nonzero value, `scheddetail` for any positive one, and a
    /// value that is not an integer leaves the key as an earlier setting
    /// in the list (or the default) left it. Reads the environment on each
    /// call; never blocks. Go reads the same variables in schedinit; there
    /// is no function for it.
    pub fn from_env() -> Config {
        let mut c = Config::default();
        if let Ok(v) = std::env::var("GOMAXPROCS") {
            if let Ok(n) = v.trim().parse::<usize>() {
                if n > 0 {
                    c.max_procs = n.min(MAX_PROCS);
                }
            }
        }
        if let Ok(v) = std::env::var("GOTRACEBACK") {
            // Go's setTraceback: a number is a level, 1 and up printing
            // every goroutine (0, 1, 2 are none, all, system; h45: only 2
            // was taken).
            let v = v.trim();
            if matches!(v, "all" | "system" | "crash") || v.parse::<u32>().is_ok_and(|n| n >= 1) {
                c.dump_on_sigquit = true;
            }
            c.crash_on_fatal = v == "crash";
        }
        if let Ok(v) = std::env::var("GODEBUG") {
            for kv in v.split(',') {
                let mut it = kv.splitn(2, '=');
                let (k, val) = (
                    it.next().unwrap_or("").trim(),
                    it.next().unwrap_or("").trim(),
                );
                // Go's integer knobs (parsegodebug): a value that is not
                // an integer leaves the key as it was (h45: it reset
                // schedtrace, and asyncpreemptoff/scheddetail took only
                // "1" where Go takes any nonzero/positive value).
                let int = val.parse::<i64>().ok();
                match k {
                    "schedtrace" => {
                        if let Some(ms) = int {
                            // Go prints only for a positive period.
                            c.schedtrace_ms = usize::try_from(ms).unwrap_or(0);
                        }
                    }
                    "scheddetail" => {
                        if let Some(n) = int {
                            c.scheddetail = n > 0;
                        }
                    }
                    "asyncpreemptoff" => {
                        if let Some(n) = int {
                            c.preempt = n == 0;
                        }
                    }
                    "goropreempt" => {
                        if val == "migrate" {
                            c.preempt_mode = PreemptMode::Migrate
                        } else if val == "pinned" {
                            c.preempt_mode = PreemptMode::Pinned
                        }
                    }
                    "gorodetect" => c.detect_blocking = val != "0",
                    "gorodeadlock" => c.deadlock_detection = val != "0",
                    "gorosysmonrescue" => c.sysmon_rescue = val != "0",
                    "gorofindrunnabledelay" => {
                        if let Ok(us) = val.parse() {
                            c.findrunnable_delay_us = us;
                        }
                    }
                    "goroasynconly" => c.async_preempt_only = val == "1",
                    // Out-of-range values are ignored like unparsable
                    // ones (Go ignores a bad GOMAXPROCS): an environment
                    // variable must not make every program abort at start.
                    "gorotimeslice" => {
                        if let Ok(us) = val.parse::<u64>() {
                            if us >= 100 {
                                c.time_slice = std::time::Duration::from_micros(us);
                            }
                        }
                    }
                    "goropinnedmax" => {
                        if let Ok(n) = val.parse::<usize>() {
                            if n >= 1 {
                                c.preempt_pinned_max = n;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        c
    }

    /// Turns deadlock detection on or off (default on); see
    /// [`Config::deadlock_detection`](Config#structfield.deadlock_detection).
    /// Any value is valid. Go has no switch for it.
    pub fn deadlock_detection(mut self, on: bool) -> Config {
        self.deadlock_detection = on;
        self
    }

    /// Turns the SIGQUIT goroutine dump on or off (default off); see
    /// [`Config::dump_on_sigquit`](Config#structfield.dump_on_sigquit).
    /// Any value is valid. Go dumps on every SIGQUIT (`GOTRACEBACK` sets
    /// how much); goro only when this is on.
    pub fn dump_on_sigquit(mut self, on: bool) -> Config {
        self.dump_on_sigquit = on;
        self
    }

    /// Ends fatal reports with SIGABRT instead of exit status 2 (default
    /// off; Go's `GOTRACEBACK=crash`); see
    /// [`Config::crash_on_fatal`](Config#structfield.crash_on_fatal).
    /// Any value is valid. Does not turn on the SIGQUIT dump by itself.
    pub fn crash_on_fatal(mut self, on: bool) -> Config {
        self.crash_on_fatal = on;
        self
    }

    /// Sets the number of Ps (Go's GOMAXPROCS), 1..=[`MAX_PROCS`] (1024);
    /// [`validate`](Config::validate) (and so [`start`]) rejects 0 and
    /// larger values (unlike [`set_max_procs`], which clamps).
    pub fn max_procs(mut self, n: usize) -> Config {
        self.max_procs = n;
        self
    }

    /// Sets the default stack reservation per goroutine (bytes, guard page
    /// excluded, rounded up to pages). [`validate`](Config::validate) (and
    /// so [`start`]) rejects sizes below [`MIN_STACK_SIZE`] or above
    /// [`MAX_STACK_SIZE`].
    pub fn stack_size(mut self, bytes: usize) -> Config {
        self.stack_size = bytes;
        self
    }

    /// Enables or disables asynchronous preemption (see
    /// [`Config::preempt`](Config#structfield.preempt); Go's
    /// `GODEBUG=asyncpreemptoff`). Any value is valid.
    pub fn preempt(mut self, on: bool) -> Config {
        self.preempt = on;
        self
    }

    /// Sets where async-preempted goroutines resume (see [`PreemptMode`]).
    /// Any value is valid. Go always migrates.
    pub fn preempt_mode(mut self, mode: PreemptMode) -> Config {
        self.preempt_mode = mode;
        self
    }

    /// Sets the most threads sleeping for pinned preempted goroutines
    /// (default 256); [`validate`](Config::validate) (and so [`start`])
    /// rejects 0. Beyond it, async preemptions are refused until a pinned
    /// goroutine runs again. Threads held by goroutines that parked while
    /// unwinding a panic do not count: that pin cannot be refused. No Go
    /// counterpart (Go does not pin).
    pub fn preempt_pinned_max(mut self, n: usize) -> Config {
        self.preempt_pinned_max = n;
        self
    }

    /// Sets the time slice (see [`Config::time_slice`]; Go's
    /// forcePreemptNS, a constant 10 ms there). [`validate`](Config::validate)
    /// (and so [`start`]) rejects a slice below 100 µs.
    pub fn time_slice(mut self, d: std::time::Duration) -> Config {
        self.time_slice = d;
        self
    }

    /// Enables or disables blocking detection (see
    /// [`Config::detect_blocking`](Config#structfield.detect_blocking)).
    /// Any value is valid. No Go counterpart (Go needs no detection: cgo
    /// and syscalls always enter the runtime).
    pub fn detect_blocking(mut self, on: bool) -> Config {
        self.detect_blocking = on;
        self
    }

    /// Checks that the configuration can run; never blocks. Errors
    /// ([`Error::InvalidConfig`], naming the field): `max_procs` 0 or above
    /// [`MAX_PROCS`], `time_slice` below 100 µs, `preempt_pinned_max` 0,
    /// `stack_size` below [`MIN_STACK_SIZE`] (64 KiB) or above
    /// [`MAX_STACK_SIZE`] (1 TiB). No Go counterpart (Go ignores bad values).
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_procs == 0 || self.max_procs > MAX_PROCS {
            return Err(Error::InvalidConfig(format!(
                "max_procs must be in 1..={MAX_PROCS}, got {}",
                self.max_procs
            )));
        }
        if self.time_slice < std::time::Duration::from_micros(100) {
            return Err(Error::InvalidConfig(format!(
                "time_slice must be at least 100 µs, got {:?}",
                self.time_slice
            )));
        }
        if self.preempt_pinned_max == 0 {
            return Err(Error::InvalidConfig(
                "preempt_pinned_max must be at least 1".to_string(),
            ));
        }
        if self.stack_size < MIN_STACK_SIZE {
            return Err(Error::InvalidConfig(format!(
                "stack_size must be at least {MIN_STACK_SIZE} bytes, got {}",
                self.stack_size
            )));
        }
        if self.stack_size > MAX_STACK_SIZE {
            return Err(Error::InvalidConfig(format!(
                "stack_size {} is larger than {MAX_STACK_SIZE} bytes (1 TiB)",
                self.stack_size
            )));
        }
        Ok(())
    }
}

/// Errors from starting the runtime.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is impossible (message says which field).
    InvalidConfig(String),
    /// The runtime is already running with a different configuration.
    AlreadyRunning,
    /// An OS resource (epoll, threads) could not be set up.
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidConfig(s) => write!(f, "goro: invalid config: {s}"),
            Error::AlreadyRunning => {
                f.write_str("goro: runtime already running with a different config")
            }
            Error::Io(e) => write!(f, "goro: cannot start the runtime: {e}"),
        }
    }
}

impl std::error::Error for Error {
    /// The OS error for `Io`; none for the others.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e)
    }
}

/// The config the runtime runs with: None until a start succeeds (a start
/// that failed, threads or fds exhausted, may be retried with any config).
/// Its lock serialises starts.
static CONFIG: crate::lock_futex::RtMutex<Option<Config>> = crate::lock_futex::RtMutex::new(None);

/// [`Config::sysmon_rescue`], read by sysmon. Written once before sysmon
/// starts (thread creation orders it), so Relaxed.
pub(crate) static SYSMON_RESCUE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// Starts the process-wide runtime with `config` (Go's schedinit). Errors:
/// `InvalidConfig` (see [`Config::validate`]), `AlreadyRunning` if it runs
/// with a different config (starting again with the same config is Ok),
/// or `Io` if epoll or a runtime thread (with `dump_on_sigquit`, also the
/// dump's thread and pipe) cannot be created (the start may then be
/// retried). Blocks the calling thread while it creates the
/// runtime's threads (sysmon and the template thread, each a
/// `pthread_create`) and while another start is in progress.
pub fn start(config: Config) -> Result<(), Error> {
    config.validate()?;
    let mut running = CONFIG.lock();
    if let Some(c) = running.as_ref() {
        return if *c == config {
            Ok(())
        } else {
            Err(Error::AlreadyRunning)
        };
    }
    SYSMON_RESCUE.store(config.sysmon_rescue, std::sync::atomic::Ordering::Relaxed);
    sched::FINDRUNNABLE_DELAY_US.store(
        config.findrunnable_delay_us,
        std::sync::atomic::Ordering::Relaxed,
    );
    sched::start(&config).map_err(Error::Io)?;
    *running = Some(config);
    drop(running);
    // The goroutine panic report, installed with the runtime so that a
    // hook the program sets after `start` replaces it predictably.
    proc::install_panic_hook();
    Ok(())
}

/// Starts the runtime from the environment if it is not running.
#[inline]
pub(crate) fn ensure_started() {
    if !sched::started() {
        start_default();
    }
}

#[cold]
fn start_default() {
    match start(Config::from_env()) {
        Ok(()) | Err(Error::AlreadyRunning) => {}
        // As std::thread::spawn panics when it cannot create the thread.
        Err(e) => panic!("{e}"),
    }
}

/// Stack reservation of the goroutine [`run`] starts: like Rust's main
/// thread (8 MiB, committed lazily), so code moved from `fn main` into
/// `goro::run` keeps its stack depth.
pub const RUN_STACK_SIZE: usize = 8 << 20;

/// Runs `f` as a goroutine on the process-wide runtime (starting it from
/// the environment if needed) and blocks the calling OS thread until it
/// returns; returns its value. A panic in `f` is resumed on the caller.
/// May be called repeatedly and from several threads at once. Its
/// goroutine plays Go's main goroutine (`main.main`), except that the
/// process does not exit when it returns. Called inside a goroutine, it
/// parks that goroutine instead (as a [`JoinHandle::join`] would).
///
/// `f`'s goroutine gets a stack like Rust's main thread:
/// [`RUN_STACK_SIZE`] (8 MiB) reserved, or the configured default if
/// larger; pages are committed only when touched.
///
/// Panics if that stack cannot be mapped (address space exhausted).
#[track_caller]
pub fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    ensure_started();
    // Relaxed: set once at start, before `started()` (Acquire) is true.
    let size = RUN_STACK_SIZE.max(
        sched::SCHED
            .stack_size
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let h = match proc::spawn_with(f, Some(size), None) {
        Ok(h) => h,
        Err(e) => panic!("goro::run: {e}"),
    };
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Like [`run`]; `config` applies if this call starts the runtime, and is
/// ignored if the runtime already runs. Blocks the calling OS thread (parks
/// a calling goroutine) until `f` returns, as [`run`] does. No Go
/// counterpart (Go reads its configuration from the environment only).
///
/// Panics if `config` is invalid (see [`Config::validate`]) or the runtime
/// cannot start ([`Error::Io`]).
#[track_caller]
pub fn run_with<F, T>(config: Config, f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match start(config) {
        Ok(()) | Err(Error::AlreadyRunning) => {}
        Err(e) => panic!("{e}"),
    }
    run(f)
}

/// Yields the processor: the goroutine goes to the back of its P's run
/// queue and others run (Go's runtime.Gosched). On a plain thread it
/// yields the thread.
#[inline]
pub fn yield_now() {
    park::gosched();
}

/// The running goroutine's id, or None on a thread not running one.
/// Never blocks and does not start the runtime. Go exposes no goroutine
/// id; this is the id `dump` and panics print (Go's `goid`).
pub fn current_id() -> Option<u64> {
    let gp = m::getg();
    if gp.is_null() {
        None
    } else {
        // SAFETY: the running G of this thread, never freed.
        Some(unsafe { (*gp).goid.get() })
    }
}

/// Wires the calling goroutine to its current OS thread (Go's
/// runtime.LockOSThread): until as many [`unlock_os_thread`] calls, it runs
/// only on this thread and the thread runs nothing else. When it parks, the
/// thread hands its P to another thread and sleeps; when it is readied, a P
/// is handed back to this thread. If the goroutine exits while locked, the
/// thread exits too (as in Go): it runs no other goroutine. Calls nest. Use for
/// thread-affine state (thread-locals that must stay put, OS thread
/// attributes). No-op outside a goroutine.
pub fn lock_os_thread() {
    park::lock_os_thread();
}

/// Undoes one [`lock_os_thread`] (Go's runtime.UnlockOSThread); extra calls
/// are no-ops. No-op outside a goroutine.
pub fn unlock_os_thread() {
    park::unlock_os_thread();
}

/// Live goroutines: runnable, running, waiting or in a syscall (Go's
/// runtime.NumGoroutine).
pub fn num_goroutine() -> usize {
    sched::gcount()
}

/// The current number of Ps (GOMAXPROCS): Go's `runtime.GOMAXPROCS(0)`.
/// Starts the runtime if needed (then it may block while creating threads,
/// and panics if the start fails); otherwise never blocks.
pub fn max_procs() -> usize {
    ensure_started();
    sched::gomaxprocs()
}

/// Sets GOMAXPROCS to `n` (clamped to MAX_PROCS) and returns the previous
/// value; `n = 0` only queries. Stops the world (every P reaches a
/// scheduling point) while the Ps are resized, as Go does; goroutines keep
/// running afterwards. Blocks the caller until the resize is done.
pub fn set_max_procs(n: usize) -> usize {
    ensure_started();
    sched::set_max_procs(n)
}

/// Scheduler statistics (see [`stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// GOMAXPROCS.
    pub gomaxprocs: usize,
    /// Ps in the idle list.
    pub idle_procs: usize,
    /// Ms (OS threads running goroutines) alive now (Go's mcount minus
    /// the threads that exited; a thread retired by a goroutine that exited
    /// while locked is no longer counted).
    pub threads: usize,
    /// Ms spinning (looking for work).
    pub spinning_threads: usize,
    /// Ms parked idle.
    pub idle_threads: usize,
    /// Goroutines in the global run queue.
    pub global_runq: usize,
    /// Goroutines in each P's local run queue (including runnext).
    pub local_runq: Vec<usize>,
    /// Live goroutines.
    pub goroutines: usize,
    /// Preemption requests honoured, cooperative and asynchronous (only
    /// grows).
    pub preemptions: u64,
    /// Of which asynchronous: goroutines interrupted by SIGURG at an
    /// arbitrary instruction (only grows).
    pub preemptions_async: u64,
    /// Ps handed off because their M was in a system call: retaken by
    /// sysmon from `enter_syscall`/detected calls, or given up at once by
    /// `enter_syscall_block` (only grows).
    pub syscalls_handed_off: u64,
    /// Blocking detection: Ps detached from a thread blocked in the kernel
    /// in an unguarded call, or computing in libc a whole time slice past
    /// its own where it could not be preempted (only grows).
    pub retakes_detected: u64,
    /// Blocking detection: detached goroutines that took a P back at a
    /// runtime entry or a signal (only grows).
    pub reacquires_detected: u64,
    /// SIGURG signals sent by sysmon or stop-the-world (only grows).
    pub preempt_signals: u64,
    /// Signals that found no async safe point (retried later; only grows).
    pub preempt_refused: u64,
    /// Async preemptions refused because `preempt_pinned_max` threads
    /// already slept for pinned goroutines (only grows).
    pub preempt_pinned_limit: u64,
    /// Threads sleeping now for a pinned preempted goroutine.
    pub pinned_threads: usize,
    /// Blocking detection is off because /proc/self/task/*/syscall could not
    /// be read.
    pub detect_unavailable: bool,
    /// Asynchronous preemption is off although configured on, because libc
    /// is linked into the executable (static glibc with `+crt-static`, or
    /// musl): a goroutine stopped inside `malloc` or stdio would hold libc's
    /// locks while it waits for a P, and the program could hang. Cooperative
    /// preemption (at every goro call) and blocking detection still work; a
    /// loop that never calls into goro keeps its P, as with
    /// `GODEBUG=asyncpreemptoff=1` (docs/PREEMPTION.md).
    pub async_preempt_static_libc: bool,
    /// Goroutine stacks ever reserved (only grows).
    pub stacks_reserved: usize,
}

/// A racy snapshot of the scheduler's state: what
/// `GODEBUG=schedtrace` prints, as values; no Go function returns it.
/// Takes the scheduler lock briefly (a runtime lock: a contended one makes
/// the thread wait on a futex; never parks). Starts the runtime if needed
/// (panics if that fails).
pub fn stats() -> Stats {
    ensure_started();
    sched::snapshot()
}

#[doc(hidden)]
pub mod __private {
    pub use crate::select::{
        __select, __select_none, __select_timeout, __slot_done, RecvSlot, Scase, SendSlot,
    };
    pub use crate::stack::guards_use_madvise;

    /// Goroutine stacks returned to the global stack cache so far (only
    /// grows): each cost one `madvise(MADV_DONTNEED)` and one global lock.
    /// Spawns of pooled sizes (the default, and powers of two up to
    /// `MAX_POOLED_STACK_SIZE`) never add to it. Test hook.
    pub fn stack_frees() -> usize {
        // Relaxed: a statistics counter.
        crate::stack::STACK_FREES.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the stack shrinker's pass period and the park age from which a
    /// goroutine's stack is shrunk (runtime/shrink.rs; both 500 ms by
    /// default). A zero period runs passes back to back, without the CPU
    /// budget: a stress-test setting. Test hook.
    pub fn set_stack_shrink(period: std::time::Duration, min_park: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        // Relaxed: tunables; sysmon reads them at each pass.
        crate::shrink::PERIOD_NS.store(ns(period), Relaxed);
        crate::shrink::MIN_PARK_NS.store(ns(min_park), Relaxed);
    }

    /// Stack shrinker counters (only grow): stacks whose dead part was
    /// released, bytes released, and transitions out of Waiting that had
    /// to wait for the shrinker's scan bit. Test hook.
    pub fn stack_shrinks() -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        // Relaxed: statistics counters.
        (
            crate::shrink::SHRUNK.load(Relaxed),
            crate::shrink::SHRUNK_BYTES.load(Relaxed),
            crate::shrink::SCAN_WAITS.load(Relaxed),
        )
    }

    /// Deadlock checks stopped by each condition (0: an M busy, 1: run
    /// queues or timers, 2: a goroutine not provably stuck, 3: a thread
    /// that could act); see runtime/deadlock.rs. Test hook.
    pub fn deadlock_rejections() -> [u64; 4] {
        core::array::from_fn(|i| {
            crate::deadlock::REJECTED[i].load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Go's export_test.go Netpoll: blocks the calling thread in netpoll
    /// for up to `ns` nanoseconds (negative: until woken) and makes the
    /// goroutines it found ready runnable (TestNetpollBreak). Test hook; call it on a plain thread (it blocks the thread without
    /// giving up a P).
    pub fn netpoll_block(ns: i64) {
        crate::ensure_started();
        let mut list = Vec::new();
        crate::netpoll::netpoll(ns, &mut list);
        crate::sched::inject_glist(&list);
    }

    /// Go's export_test.go NetpollBreak: wakes a thread blocked in netpoll.
    /// Test hook.
    pub fn netpoll_break() {
        crate::ensure_started();
        crate::netpoll::netpoll_break();
    }

    /// Writes one `GODEBUG=schedtrace=1,scheddetail=1` report (every P, M
    /// and G) to stderr, for test watchdogs that found a hang. Racy
    /// snapshot; takes sched.lock briefly. Test hook.
    pub fn sched_detail() {
        if crate::sched::started() {
            crate::sysmon::schedtrace(0, true);
        }
    }

    /// Lets the next `after` runtime thread creations succeed and makes
    /// the `n` after them fail with EAGAIN, as at RLIMIT_NPROC (which root
    /// ignores), so a test can check what a start does then.
    pub fn fail_thread_creations(after: i64, n: i64) {
        use core::sync::atomic::Ordering::Relaxed;
        crate::os::FAIL_THREADS_AFTER.store(after, Relaxed);
        crate::os::FAIL_THREADS.store(n, Relaxed);
    }

    /// Makes the next `n` goroutine stack mappings fail with ENOMEM, as
    /// when the address space is exhausted (RLIMIT_AS, which qemu-user
    /// does not apply), so a test can check what a failed spawn leaves
    /// behind. Only spawns that map a new stack (no dead goroutine's stack
    /// of their size to reuse) reach it.
    pub fn fail_stack_allocs(n: i64) {
        crate::stack::FAIL_ALLOCS.store(n, core::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the calling thread's M is inside a runtime critical section
    /// (where parking is forbidden), so a test can check that user code
    /// (a destructor) never runs in one.
    pub fn in_critical_section() -> bool {
        crate::m::in_critical_section()
    }

    /// The calling thread's M's critical-section count (Go's m.locks; 0 on
    /// a plain thread), so a test can check that user code always sees 0.
    pub fn m_locks() -> i32 {
        crate::m::locks()
    }

    /// Whether the goroutine with id `goid` is parked (Waiting), so a test
    /// can act only once a peer really sleeps; None if no live G has that
    /// id. Racy snapshot, as GODEBUG=scheddetail reads it.
    pub fn goroutine_parked(goid: u64) -> Option<bool> {
        for &gp in crate::g::ALLGS.lock().iter() {
            // SAFETY: Gs are never freed; racy diagnostic reads (as in
            // sysmon's scheddetail dump).
            let g = unsafe { &*(gp as *const crate::g::G) };
            let st = g.status();
            if st != crate::g::GStatus::Dead && g.goid.get() == goid {
                return Some(st == crate::g::GStatus::Waiting);
            }
        }
        None
    }

    /// How long the goroutine with id `goid` has been parked by its park
    /// stamp (`g.waitsince`, what `dump` prints as minutes), or None if no
    /// live G has that id or it is not parked. Racy snapshot. Test hook.
    pub fn parked_for(goid: u64) -> Option<std::time::Duration> {
        for &gp in crate::g::ALLGS.lock().iter() {
            // SAFETY: Gs are never freed; racy diagnostic reads (as in
            // goroutine_parked).
            let g = unsafe { &*(gp as *const crate::g::G) };
            if g.status() == crate::g::GStatus::Waiting && g.goid.get() == goid {
                // Relaxed: a diagnostic read of the stamp, as dump's.
                let since = g.waitsince.load(std::sync::atomic::Ordering::Relaxed)
                    & !crate::shrink::HANDLED;
                let ns = (crate::os::nanotime() - since).max(0);
                return Some(std::time::Duration::from_nanos(ns as u64));
            }
        }
        None
    }

    /// Go's export_test.go Semacquire: runtime sema acquire on `addr`.
    pub fn semacquire(addr: &core::sync::atomic::AtomicU32) {
        crate::ensure_started();
        crate::sema::semacquire(addr, false, crate::waitreason::WaitReason::Semacquire)
    }

    /// Go's export_test.go Semrelease1(addr, handoff, 0).
    pub fn semrelease1(addr: &core::sync::atomic::AtomicU32, handoff: bool) {
        crate::ensure_started();
        crate::sema::semrelease(addr, handoff)
    }

    /// Go's export_test.go SemNwait: waiters counted on `addr`'s root.
    pub fn sem_nwait(addr: &core::sync::atomic::AtomicU32) -> u32 {
        crate::sema::sem_nwait(addr)
    }

    /// Entries (live or stale) in the timer heap of P `p` (0 for a P that
    /// does not exist): a test hook. Racy snapshot.
    pub fn timers_on_p(p: usize) -> usize {
        crate::ensure_started();
        if p < crate::sched::gomaxprocs() {
            crate::sched::allp(p).timers.len()
        } else {
            0
        }
    }

    /// How many times an M has entered the `gorofindrunnabledelay` wait
    /// (test hook: a test waits for it to know an M is inside the window).
    pub fn findrunnable_delays() -> u64 {
        crate::sched::FINDRUNNABLE_DELAYS.load(core::sync::atomic::Ordering::SeqCst)
    }

    /// /proc probes sysmon has made of detached Ms (test hook: the scan of
    /// Ms detached by blocking detection is bounded).
    pub fn detached_probes() -> u64 {
        crate::sysmon::DETACHED_PROBES.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// `goro::io::copy` calls that moved their bytes with splice(2) or
    /// sendfile(2) (test hook).
    pub fn kernel_copies() -> u64 {
        crate::net::splice::KERNEL_COPIES.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Entries (live or stale) in all Ps' timer heaps: a test hook for the
    /// collection of unobservable timers. Racy snapshot.
    pub fn timers_pending() -> usize {
        (0..crate::max_procs()).map(timers_on_p).sum()
    }

    /// Sets the calling goroutine's preemption flag, as sysmon's
    /// preemptone does, without the signal: the goroutine yields at its
    /// next preemption check (a test asks which calls check). No-op on a
    /// plain thread. Test hook.
    pub fn request_preempt() {
        let gp = crate::m::getg();
        if !gp.is_null() {
            // SAFETY: the running G (never freed); `preempt` is atomic.
            unsafe {
                (*gp)
                    .preempt
                    .store(true, std::sync::atomic::Ordering::Relaxed)
            };
        }
    }

    /// The calling thread's M as an opaque token (0 on a plain thread), for
    /// [`send_preempt_signal`] and [`preempt_signal_pending`]. Test hook.
    pub fn current_m() -> usize {
        crate::m::getm() as usize
    }

    /// From another thread: sends the M `m` (a [`current_m`] token) the
    /// SIGURG preemption request sysmon sends, setting the flag of the G it
    /// runs first if `set_flag` (as sysmon does) or not (a request that G
    /// has already honoured). Test hook.
    pub fn send_preempt_signal(m: usize, set_flag: bool) {
        // SAFETY: a token from current_m: Ms are never freed.
        let m = unsafe { &*(m as *const crate::m::M) };
        if set_flag {
            crate::preempt::request_m(m, false);
        }
        crate::preempt::signal_m(m, crate::preempt::REQ_PREEMPT);
    }

    /// From another thread: asks the G running on M `m` (a [`current_m`]
    /// token) to stop, with the request sysmon escalates to for a G that
    /// keeps refusing in foreign code (REQ_PREEMPT_OR_DETACH): a signal
    /// that lands outside the executable (the vDSO, libc) detaches the P
    /// as for a blocked system call. Test hook.
    pub fn send_preempt_or_detach_signal(m: usize) {
        // SAFETY: a token from current_m: Ms are never freed.
        let m = unsafe { &*(m as *const crate::m::M) };
        crate::preempt::request_m(m, false);
        crate::preempt::signal_m(m, crate::preempt::REQ_PREEMPT_OR_DETACH);
    }

    /// Whether the M `m`'s SIGURG handler has yet to take the request
    /// [`send_preempt_signal`] stored. Test hook.
    pub fn preempt_signal_pending(m: usize) -> bool {
        // SAFETY: as in send_preempt_signal.
        let m = unsafe { &*(m as *const crate::m::M) };
        // Relaxed: the caller spins until the handler's swap shows.
        m.preempt_req.load(std::sync::atomic::Ordering::Relaxed) != 0
    }
}

/// Microbenchmark hooks (not public API).
#[doc(hidden)]
pub mod __bench {
    /// Time for `iters` round trips of two raw context switches between
    /// two stacks (no scheduler): the floor under every goroutine switch.
    pub fn raw_switch_pair(iters: u64) -> std::time::Duration {
        crate::arch::bench_switch(iters)
    }
}
