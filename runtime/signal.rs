//! Relaying signals to channels: Go's `os/signal` (`Notify`, `Stop`) and
//! the runtime half behind it (sigqueue.go).
//!
//! ```no_run
//! use goro::signal::{self, Signal};
//!
//! goro::run(|| {
//!     let (tx, rx) = goro::chan(1);
//!     signal::notify(&tx, &[Signal::SIGINT, Signal::SIGTERM]).unwrap();
//!     // ... serve; then, in a select! beside the work, or at the end:
//!     let sig = rx.recv().unwrap();
//!     eprintln!("got {sig}, shutting down");
//! });
//! ```
//!
//! # Delivery (Go's semantics)
//!
//! - A relayed signal no longer has its default effect (SIGINT and SIGTERM
//!   no longer end the process); the channel receives it instead.
//! - Delivery never blocks: a signal that arrives while the channel is
//!   full is dropped for that channel. Use a buffer of at least 1.
//! - Like Go's, the runtime's queue is one bit per signal: several
//!   arrivals of one signal before the relay goroutine runs are delivered
//!   once.
//! - After [`stop`] returns, the channel receives nothing more; a signal
//!   that no channel relays any longer gets the disposition it had before
//!   the first `notify` back (its default action, `SIG_IGN`, or the
//!   handler installed before, such as goro's SIGQUIT dump).
//!
//! # How
//!
//! The first `notify` of a signal installs goro's handler for it
//! (`sigaction`, remembering the disposition it replaces). The handler,
//! async-signal-safe, sets the signal's bit in a pending mask and writes a
//! byte to a socket pair (Go wakes a note instead: goro's relay is a
//! goroutine parked in the netpoller on the read end). The relay goroutine
//! swaps the mask and sends each pending signal to every channel that
//! relays it, with `try_send`. It exits when no channel relays anything;
//! while it waits, as in Go, the deadlock report stays off (a signal can
//! still wake the program).
//!
//! The relay goroutine is also Go's signal M (ensureSigM): it locks its
//! thread and unblocks there every signal some channel relays. goro's
//! threads inherit the mask of the thread that started the runtime; a
//! daemon that blocked SIGTERM before starting it would otherwise never
//! see one. `stop` waits until the relay has blocked a signal again on its
//! thread before it gives the signal back its old disposition (Go's
//! maskUpdatedChan), so a blocked signal never meets a default action in
//! between.

use crate::chan::Sender;
use core::fmt;
use core::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::io;
use std::io::Read;
use std::os::fd::{AsRawFd, IntoRawFd};

/// A POSIX signal number (Go's `syscall.Signal`). The constants name the
/// ones programs usually relay; any number from 1 to 64 can be made with
/// [`Signal::from_raw`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(libc::c_int);

impl Signal {
    /// Hang-up (terminal closed; daemons: reload configuration).
    pub const SIGHUP: Signal = Signal(libc::SIGHUP);
    /// Interrupt from the keyboard (Ctrl-C). Go's `os.Interrupt`.
    pub const SIGINT: Signal = Signal(libc::SIGINT);
    /// Quit from the keyboard (Ctrl-\\). Relaying it replaces goro's
    /// goroutine dump until [`stop`].
    pub const SIGQUIT: Signal = Signal(libc::SIGQUIT);
    /// User-defined signal 1.
    pub const SIGUSR1: Signal = Signal(libc::SIGUSR1);
    /// User-defined signal 2.
    pub const SIGUSR2: Signal = Signal(libc::SIGUSR2);
    /// Write to a pipe with no reader (goro's sockets never raise it).
    pub const SIGPIPE: Signal = Signal(libc::SIGPIPE);
    /// Timer expired (`alarm`).
    pub const SIGALRM: Signal = Signal(libc::SIGALRM);
    /// Termination request (`kill`'s default, systemd's stop).
    pub const SIGTERM: Signal = Signal(libc::SIGTERM);
    /// A child process stopped or exited.
    pub const SIGCHLD: Signal = Signal(libc::SIGCHLD);
    /// Continue after a stop.
    pub const SIGCONT: Signal = Signal(libc::SIGCONT);
    /// Stop from the terminal (Ctrl-Z).
    pub const SIGTSTP: Signal = Signal(libc::SIGTSTP);
    /// Terminal window size changed.
    pub const SIGWINCH: Signal = Signal(libc::SIGWINCH);

    /// The signal with number `signo` (not checked here: [`notify`]
    /// rejects numbers outside 1..=64). Go's `syscall.Signal(signo)`. Never
    /// blocks or panics.
    pub const fn from_raw(signo: libc::c_int) -> Signal {
        Signal(signo)
    }

    /// The signal's number: Go's `int(sig)` of a `syscall.Signal`. Never
    /// blocks or panics.
    pub const fn as_raw(self) -> libc::c_int {
        self.0
    }
}

impl fmt::Display for Signal {
    /// The C name (`SIGINT`), or `signal N` for an unnamed number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::SIGHUP => "SIGHUP",
            libc::SIGINT => "SIGINT",
            libc::SIGQUIT => "SIGQUIT",
            libc::SIGUSR1 => "SIGUSR1",
            libc::SIGUSR2 => "SIGUSR2",
            libc::SIGPIPE => "SIGPIPE",
            libc::SIGALRM => "SIGALRM",
            libc::SIGTERM => "SIGTERM",
            libc::SIGCHLD => "SIGCHLD",
            libc::SIGCONT => "SIGCONT",
            libc::SIGTSTP => "SIGTSTP",
            libc::SIGTTIN => "SIGTTIN",
            libc::SIGTTOU => "SIGTTOU",
            libc::SIGXCPU => "SIGXCPU",
            libc::SIGXFSZ => "SIGXFSZ",
            libc::SIGVTALRM => "SIGVTALRM",
            libc::SIGPROF => "SIGPROF",
            libc::SIGWINCH => "SIGWINCH",
            libc::SIGIO => "SIGIO",
            libc::SIGPWR => "SIGPWR",
            n => return write!(f, "signal {n}"),
        };
        f.write_str(name)
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Signals goro cannot relay: the two no handler sees, the synchronous
/// faults (a handler returning re-executes the faulting instruction), and
/// SIGURG, the runtime's preemption signal.
const FORBIDDEN: [libc::c_int; 9] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGURG,
];

/// Pending signals, bit `n - 1` for signal n (Go's sig.mask). Set by the
/// handler, swapped to 0 by the relay goroutine. AcqRel on both sides is
/// not needed for the bit itself (it carries no data); Relaxed suffices
/// because the wake-up byte written after it is read before the swap
/// (the socket orders them).
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Write end of the wake-up socket pair, -1 until the first `notify` (and
/// again if the relay goroutine could not be spawned). Relaxed: stored
/// before any handler that reads it is installed (sigaction orders it).
static WAKE_W: AtomicI32 = AtomicI32::new(-1);

/// One relaying channel: the signals (bit n - 1 for n) it asked for.
struct Sub {
    tx: Sender<Signal>,
    mask: u64,
}

/// The relay's state (Go's handlers.ref and sig.wanted), under a goro
/// mutex: notify, stop and the relay goroutine park on it.
struct Relay {
    subs: Vec<Sub>,
    /// Signals with goro's handler installed, and what each replaced.
    installed: u64,
    prev: Vec<(libc::c_int, libc::sigaction)>,
    /// The relay goroutine runs (it owns the read end while it does).
    running: bool,
    /// The read end while no relay goroutine runs.
    wake_r: Option<crate::net::UnixStream>,
    /// Signals the relay has unblocked on its thread (relay_loop); zero
    /// while no relay runs.
    opened: u64,
}

/// Broadcast by the relay when it has changed `Relay::opened` (Go's
/// maskUpdatedChan).
static MASK_UPDATED: crate::sync::Cond = crate::sync::Cond::new();

static RELAY: crate::sync::Mutex<Relay> = crate::sync::Mutex::new(Relay {
    subs: Vec::new(),
    installed: 0,
    prev: Vec::new(),
    running: false,
    wake_r: None,
    opened: 0,
});

fn bit(sig: libc::c_int) -> u64 {
    1u64 << (sig - 1)
}

/// Go's `signal.Notify(c, sigs...)`: from now on each of `sigs` is sent
/// to `tx` instead of having its default effect. Calling it again for the
/// same channel (any clone of `tx`) adds signals; several channels may
/// relay one signal (each gets it). Delivery uses `try_send` and never
/// blocks: give the channel a buffer.
///
/// A signal blocked on every thread (a mask set before the runtime
/// started) is unblocked on the relay goroutine's own thread, as Go's
/// signal M does (module doc).
///
/// Blocks only briefly (a goro mutex; the first call creates a socket
/// pair and spawns the relay goroutine, starting the runtime if needed).
///
/// # Errors
///
/// - `InvalidInput` if `sigs` is empty, or holds a number outside 1..=64,
///   SIGKILL or SIGSTOP (which cannot be caught), a synchronous fault
///   (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) or SIGURG (the
///   runtime's preemption signal). Nothing is changed then.
/// - The OS error if the socket pair, `sigaction` or the relay goroutine's
///   stack fails. Nothing is changed then either: the signals this call
///   installed get their previous disposition back (one that arrived
///   meanwhile is raised again under it).
pub fn notify(tx: &Sender<Signal>, sigs: &[Signal]) -> io::Result<()> {
    if sigs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "goro::signal::notify: no signals given",
        ));
    }
    let mut mask = 0u64;
    for &Signal(n) in sigs {
        if !(1..=64).contains(&n) || FORBIDDEN.contains(&n) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("goro::signal::notify: {} cannot be relayed", Signal(n)),
            ));
        }
        mask |= bit(n);
    }
    // Start the runtime first: its start installs SIGQUIT's dump handler,
    // which must be the disposition a relay of SIGQUIT replaces, not one
    // that replaces the relay.
    crate::ensure_started();
    let mut r = RELAY.lock();
    if WAKE_W.load(Ordering::Relaxed) < 0 {
        let (rd, wr) = std::os::unix::net::UnixStream::pair()?;
        wr.set_nonblocking(true)?;
        let rd = crate::net::UnixStream::try_from(rd)?;
        WAKE_W.store(wr.into_raw_fd(), Ordering::Relaxed);
        r.wake_r = Some(rd);
    }
    // The channel's mask before this call (None: a new channel), for the
    // roll-back below.
    let old_mask = match r.subs.iter_mut().find(|s| s.tx.same_channel(tx)) {
        Some(s) => {
            let m = s.mask;
            s.mask |= mask;
            Some(m)
        }
        None => {
            r.subs.push(Sub {
                tx: tx.clone(),
                mask,
            });
            None
        }
    };
    let mut added = Vec::new();
    let r2 = &mut *r;
    let res = (|| {
        for n in 1..=64 {
            if mask & bit(n) != 0 && r2.installed & bit(n) == 0 {
                let prev = install(n)?;
                r2.installed |= bit(n);
                r2.prev.push((n, prev));
                added.push(n);
            }
        }
        if r2.running {
            // The relay opens newly relayed signals on its thread (see
            // relay_loop). Until it has, a blocked signal stays pending
            // for the process, and is delivered then.
            wake();
            return Ok(());
        }
        let rd = r2.wake_r.take().expect("relay: read end without a relay");
        match crate::Builder::new()
            .name("goro::signal relay")
            .spawn(move || relay_loop(rd))
        {
            Ok(_) => {
                r2.running = true;
                Ok(())
            }
            Err(e) => {
                // The closure (and the read end in it) was dropped: make a
                // fresh pair next time.
                let w = WAKE_W.swap(-1, Ordering::Relaxed);
                // SAFETY: w is our own fd, no longer read by a relay; a
                // handler racing this close writes to -1 or to the closed
                // fd and fails with EBADF (the bit stays pending). (A new
                // fd reusing the number could get one stray byte: a
                // window of a failed spawn, accepted.)
                unsafe { libc::close(w) };
                Err(e)
            }
        }
    })();
    if res.is_err() {
        // Nothing is changed by a failed call (h27: the signals it
        // installed were caught and relayed by nobody, e.g. SIGTERM no
        // longer ended the process): the channel's mask and the
        // dispositions it replaced come back; one of its signals that
        // arrived meanwhile is raised again under the old disposition.
        match old_mask {
            Some(m) => {
                if let Some(s) = r.subs.iter_mut().find(|s| s.tx.same_channel(tx)) {
                    s.mask = m;
                }
            }
            None => r.subs.retain(|s| !s.tx.same_channel(tx)),
        }
        for n in added {
            if let Some(i) = r.prev.iter().position(|&(p, _)| p == n) {
                let (_, prev) = r.prev.swap_remove(i);
                // SAFETY: prev is the disposition sigaction reported for n.
                unsafe { libc::sigaction(n, &prev, core::ptr::null_mut()) };
            }
            r.installed &= !bit(n);
            if PENDING.fetch_and(!bit(n), Ordering::Relaxed) & bit(n) != 0 {
                // SAFETY: raising a signal with its pre-notify disposition.
                unsafe { libc::raise(n) };
            }
        }
    }
    res
}

/// Go's `signal.Stop(c)`: `tx`'s channel (any clone of it) receives no
/// more signals once this returns. A signal that no channel relays any
/// longer gets back the disposition it had before goro's first `notify`
/// of it, once the relay's thread has blocked it again if it was blocked
/// before (module doc). Stopping a channel that relays nothing is a
/// no-op. Blocks only briefly (a goro mutex, and the relay goroutine's
/// next turn when a blocked signal is given back).
pub fn stop(tx: &Sender<Signal>) {
    let mut r = RELAY.lock();
    let before = r.subs.len();
    r.subs.retain(|s| !s.tx.same_channel(tx));
    if r.subs.len() == before {
        return;
    }
    // Go's sigdisable: the relay's thread blocks again what it unblocked
    // for signals no channel relays now (relay_loop) before their previous
    // disposition comes back: a signal the program had blocked must not
    // meet its default action on that thread in between.
    wake();
    while r.opened & !wanted(&r) != 0 {
        r = MASK_UPDATED.wait(r);
    }
    let wanted = wanted(&r);
    let mut i = 0;
    while i < r.prev.len() {
        let (n, prev) = r.prev[i];
        if wanted & bit(n) == 0 {
            // SAFETY: prev is the disposition sigaction reported for n.
            unsafe { libc::sigaction(n, &prev, core::ptr::null_mut()) };
            r.installed &= !bit(n);
            PENDING.fetch_and(!bit(n), Ordering::Relaxed);
            r.prev.swap_remove(i);
        } else {
            i += 1;
        }
    }
}

/// The signals some channel relays.
fn wanted(r: &Relay) -> u64 {
    r.subs.iter().fold(0u64, |m, s| m | s.mask)
}

/// Installs goro's handler for `n`; returns the disposition it replaced.
fn install(n: libc::c_int) -> io::Result<libc::sigaction> {
    // SAFETY: zeroed sigactions are valid values; sa is filled with an
    // async-signal-safe handler and an empty mask.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut prev: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(n, &sa, &mut prev) != 0 {
            return Err(crate::os::last_os_error());
        }
        Ok(prev)
    }
}

/// Go's sigsend: marks `sig` pending and wakes the relay.
/// Async-signal-safe: an atomic and write(2); errno is preserved.
extern "C" fn handler(sig: libc::c_int) {
    PENDING.fetch_or(bit(sig), Ordering::Relaxed);
    wake();
}

/// Writes one byte to the wake-up socket (non-blocking: if it is full,
/// the relay has bytes to read anyway). Async-signal-safe.
fn wake() {
    let fd = WAKE_W.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    crate::os::write_byte_keeping_errno(fd);
}

/// The relay goroutine (Go's os/signal loop over signal_recv): waits for
/// wake-up bytes in the netpoller, then sends every pending signal to the
/// channels that relay it. Exits when no channel relays anything.
///
/// It is also Go's signal M (ensureSigM): locked to its thread, it keeps
/// every relayed signal unblocked on that thread, so a signal the program
/// blocked before the runtime started (every goro thread inherits that
/// mask) still reaches the handler and the channel. Relayed signals that
/// are not blocked arrive on whichever thread the kernel picks, as before.
/// Before it exits (a locked G's exit also ends its thread) it blocks them
/// again.
fn relay_loop(mut rd: crate::net::UnixStream) {
    crate::lock_os_thread();
    let inherited = blocked_here();
    let mut buf = [0u8; 64];
    loop {
        {
            let mut r = RELAY.lock();
            let want = wanted(&r) & inherited;
            if want != r.opened {
                r.opened = open_on_this_thread(want, r.opened);
                MASK_UPDATED.notify_all();
            }
        }
        match rd.read(&mut buf) {
            Ok(0) => return, // write end closed: notify failed to spawn us
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => crate::throw::throwf(format_args!(
                "goro::signal relay: read of fd {} failed: {e}",
                rd.as_raw_fd()
            )),
        }
        let pending = PENDING.swap(0, Ordering::Relaxed);
        let mut r = RELAY.lock();
        for n in 1..=64 {
            if pending & bit(n) == 0 {
                continue;
            }
            for s in &r.subs {
                if s.mask & bit(n) != 0 {
                    // Full or closed: dropped for this channel, as in Go.
                    let _ = s.tx.try_send(Signal(n));
                }
            }
        }
        if r.subs.is_empty() {
            r.opened = open_on_this_thread(0, r.opened);
            MASK_UPDATED.notify_all();
            r.running = false;
            r.wake_r = Some(rd);
            return;
        }
    }
}

/// The calling thread's blocked signals, bit n - 1 for signal n.
fn blocked_here() -> u64 {
    // SAFETY: a zeroed sigset_t is a valid argument to fill; the query
    // (null new set) changes nothing.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        (1..=64).fold(0u64, |m, n| {
            if libc::sigismember(&set, n) == 1 {
                m | bit(n)
            } else {
                m
            }
        })
    }
}

/// Unblocks on the calling thread the signals in `want` that `opened` (what
/// it unblocked so far) lacks, and blocks again those in `opened` no longer
/// wanted (Go's ensureSigM on enableSigChan / disableSigChan). Returns the
/// new `opened`.
fn open_on_this_thread(want: u64, opened: u64) -> u64 {
    let sigs = |bits: u64| (1..=64).filter(move |&n| bits & bit(n) != 0);
    let (open, close) = (want & !opened, opened & !want);
    if open != 0 {
        crate::signal_unix::change_thread_mask(libc::SIG_UNBLOCK, sigs(open));
    }
    if close != 0 {
        crate::signal_unix::change_thread_mask(libc::SIG_BLOCK, sigs(close));
    }
    want
}
