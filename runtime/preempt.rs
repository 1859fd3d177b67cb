//! Asynchronous preemption and blocking detection: the SIGURG side of Go's
//! preemptone / doSigPreempt / asyncPreempt (preempt.go, signal_unix.go),
//! plus what Rust needs and Go does not.
//!
//! # Preemption, sound for Rust code
//!
//! sysmon (sysmon.rs) asks a G that has run on its P for more than 10 ms
//! (forcePreemptNS), while other work waits, to yield: it sets `g.preempt`
//! (honoured at the next runtime entry) and, unless the M already has a
//! request pending, stores a request in `m.preempt_req` and sends SIGURG to
//! the M's thread with tgkill. The handler (signal_unix.rs → [`on_signal`], on
//! the M's alternate stack) takes the request and decides whether the
//! interrupted point is an *async safe point*:
//!
//! - the M has a user G (`curg`; not g0) and `m.locks == 0` (no runtime
//!   critical section: every runtime path on a user G that holds a lock or
//!   uses its M's P runs under `acquirem`);
//! - the G is Running (not in a syscall);
//! - the interrupted sp is inside the G's stack, with room below it for the
//!   saved state (so not on g0 or the signal stack);
//! - the pc is in the main executable's text (not libc, ld.so, the vdso or
//!   another shared object, whose locks and thread caches goro cannot see)
//!   and not in goro's assembly (mid-switch);
//! - the interrupted context blocks no signal that the M's thread did not
//!   block at its start (`m.sigmask`): not a signal handler's;
//! - in pinned mode, fewer than the configured number of Ms are already
//!   sleeping for pinned Gs.
//!
//! A refused point is retried at sysmon's next tick. At a safe point the
//! handler copies the kernel's signal frame — which already holds the
//! complete register state: every GPR, flags, the whole xsave area with the
//! XCR0 mask on x86_64, x0–x30/sp/pstate/q0–q31/fpsr/fpcr (and SVE) on
//! aarch64 — onto the G's stack below the red zone, and rewrites the live
//! context to enter `goro_async_preempt` (asm/) there. That trampoline
//! calls [`async_preempt`], which parks the G (mcall to g0); when the G is
//! resumed, rt_sigreturn on the copy restores everything exactly.
//!
//! # Pinned and migrating modes
//!
//! Rust code may hold thread-affine state at any instruction: a
//! `thread_local!` borrow, std's stdout lock (its owner is a thread id), a
//! `std::sync::MutexGuard`, an allocator's thread cache. So by default
//! ([`PreemptMode::Pinned`]) an async-preempted G keeps its M: the G is
//! marked `pinned` (lockedm = its M, as if lock_os_thread) and queued
//! globally; the M hands its P to another M and sleeps (stoplockedm);
//! whichever M dequeues the G gives its P to the G's M (startlockedm). The
//! G thus resumes on its own thread, with nothing else having run there in
//! between. At most `preempt_pinned_max` Ms sleep this way; beyond, async
//! preemption is refused (the G runs on until it yields or enters the
//! runtime). [`PreemptMode::Migrate`] is Go's behaviour: the preempted G
//! resumes on any M. It is cheaper (no thread hand-back) and unsound for
//! code holding thread-affine state across arbitrary instructions.
//!
//! Cooperative preemption at runtime entries is unaffected: those are
//! switch points, where migrating is allowed anyway.
//!
//! # Blocking detection
//!
//! A G that blocks its thread in the kernel without `enter_syscall` (a bare
//! `std::thread::sleep`, a blocking `read`, a contended `std::sync::Mutex`)
//! holds its P. sysmon notices a P whose G has not changed for a tick while
//! other work waits, reads `/proc/self/task/<tid>/syscall` for its M (a
//! syscall number: blocked; `running`: computing) and, if blocked, sends a
//! *detach* request. The handler, on the M's own thread — so without racing
//! the M's own use of its P — checks that the thread really is in a system
//! call (the pc at or just after the syscall instruction) and does what
//! `enter_syscall` would have done: G → Syscall, P → Syscall kept as
//! `m.oldp`, and marks the M `detached`. sysmon's ordinary syscall retake
//! then hands the P off. SA_RESTART resumes the interrupted call.
//!
//! When the call returns, the G runs user code without a P until its next
//! runtime entry ([`reacquire`], via `parkable_g`, runtime locks and every
//! mcall), which exits the implicit syscall (its old P back if still
//! free, any idle P, or queue and park pinned to its M: the entry need not
//! be a switch point, so the G goes on on its own thread); if it computes
//! without entering the runtime, sysmon signals it (it is `running` again)
//! and the handler sends it through the trampoline, where it reacquires in
//! the same way.

use crate::g::{GStatus, Pin, G};
use crate::m::{getm, M};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// What a preempted goroutine may do about its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PreemptMode {
    /// An asynchronously preempted goroutine resumes on the OS thread it
    /// was interrupted on, which runs nothing else meanwhile: sound for
    /// thread-locals, std's stdout lock and `std::sync` guards held at any
    /// instruction. Costs a thread hand-back per preemption and one
    /// sleeping thread per preempted goroutine (bounded by
    /// `Config::preempt_pinned_max`).
    #[default]
    Pinned,
    /// Go's behaviour: a preempted goroutine resumes on any thread. Cheaper;
    /// unsound if the goroutine holds thread-affine state (a
    /// `thread_local!` borrow, a std `MutexGuard`, stdout's lock) in code
    /// that never calls into goro, and std's own thread-locals are exposed
    /// too: a goroutine preempted as it starts a panic can leave the panic
    /// count on its old thread, which then aborts at its next panic. goro's
    /// own code is safe in this mode:
    /// a goroutine interrupted while it reads its thread's M keeps the M
    /// for that preemption (docs/PREEMPTION.md).
    Migrate,
}

/// sysmon's requests to an M's SIGURG handler (`m.preempt_req`).
pub(crate) const REQ_PREEMPT: u32 = 1;
pub(crate) const REQ_DETACH: u32 = 2;
/// REQ_PREEMPT, except that if the pc is outside the executable's code
/// (libc, the vDSO, another shared library), where the G cannot be
/// stopped, its P is detached as for a blocked system call (Go treats
/// every cgo call as one), and the G runs on without a P until its next
/// runtime entry. Sent for a G that has kept refusing REQ_PREEMPT: by
/// sysmon after FOREIGN_REFUSALS_TO_DETACH refusals in a row and a whole
/// slice, by stop-the-world after 10 ms of waiting.
pub(crate) const REQ_PREEMPT_OR_DETACH: u32 = 3;

/// Refusals in a row (pc outside the executable) before sysmon escalates
/// to REQ_PREEMPT_OR_DETACH. A loop that lives in libc (large memcpys, file
/// reads) refuses nearly every signal; one that only calls into the vDSO
/// often (`Instant::now()` in a spin-until-deadline loop) lands in its own
/// code often enough to be preempted normally: with 1 in 3 signals in
/// libc or the vDSO, eight in a row happen about once in 6,500 requests.
/// A first version escalated after one refusal and detached such loops
/// instead of preempting them (`pinned_limit` then never reached its
/// limit under qemu, where the vDSO is slow).
pub(crate) const FOREIGN_REFUSALS_TO_DETACH: u32 = 8;

/// Async preemption on (Config::preempt, GODEBUG=asyncpreemptoff=1).
/// Written once at start; Relaxed: read by sysmon and handlers after the
/// start that published it (thread creation orders it).
pub(crate) static ASYNC_ENABLED: AtomicBool = AtomicBool::new(false);
/// Config::async_preempt_only (a test knob): check points ignore the flag
/// and sysmon signals without grace. Written once at start; Relaxed as
/// ASYNC_ENABLED.
pub(crate) static ASYNC_ONLY: AtomicBool = AtomicBool::new(false);
/// Blocking detection on (Config::detect_blocking); may be turned off by
/// sysmon when /proc is unreadable. Relaxed: a switch with no data behind
/// it (set at start as ASYNC_ENABLED; sysmon's later clear may be seen late).
pub(crate) static DETECT_ENABLED: AtomicBool = AtomicBool::new(false);
/// [`PreemptMode`] as u8 (0 pinned, 1 migrate). Written once at start;
/// Relaxed as ASYNC_ENABLED.
static MODE: AtomicU8 = AtomicU8::new(0);
/// Most Ms sleeping for a pinned G at once (Config::preempt_pinned_max).
/// Written once at start; Relaxed as ASYNC_ENABLED.
static PINNED_MAX: AtomicUsize = AtomicUsize::new(256);
/// Ms currently sleeping (or about to) for a G pinned by async preemption
/// ([`Pin::Preempted`]). Incremented by the handler's decision, decremented
/// when the G runs again. Required pins (a G parked while unwinding, a
/// detached G waiting for a P) are not counted: they cannot be refused,
/// and counting them let a few parked unwinders use up the limit and stop
/// async preemption for good (h30). Relaxed: a count compared with
/// PINNED_MAX (the RMWs keep it exact); nothing is read through it.
pub(crate) static PINNED: AtomicUsize = AtomicUsize::new(0);

/// Statistics (only grow; Relaxed: independent counters; DETECT_UNAVAILABLE
/// is a sticky flag, reported only).
pub(crate) static PREEMPTIONS_ASYNC: AtomicU64 = AtomicU64::new(0);
pub(crate) static PREEMPT_SIGNALS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PREEMPT_REFUSED: AtomicU64 = AtomicU64::new(0);
pub(crate) static PREEMPT_PINNED_LIMIT: AtomicU64 = AtomicU64::new(0);
pub(crate) static RETAKES_DETECTED: AtomicU64 = AtomicU64::new(0);
pub(crate) static REACQUIRES: AtomicU64 = AtomicU64::new(0);
pub(crate) static DETECT_UNAVAILABLE: AtomicBool = AtomicBool::new(false);
/// Async preemption was turned off at start because libc is linked into
/// the executable ([`libc_is_static`]). Written once in `init`; Relaxed as
/// ASYNC_ENABLED (reported only).
pub(crate) static STATIC_LIBC: AtomicBool = AtomicBool::new(false);

/// The main executable's text [lo, hi), found at start. Relaxed: written
/// in `init` before sysmon and the Ms exist (thread creation orders it).
static TEXT_LO: AtomicUsize = AtomicUsize::new(0);
static TEXT_HI: AtomicUsize = AtomicUsize::new(0);

/// Headroom the G's stack must have below the interrupted sp: the frame
/// copy (≤ a few KiB even with AVX-512 or SVE), the trampoline's and
/// async_preempt's frames and the mcall frame, with a margin.
const STACK_HEADROOM: usize = 16 << 10;

/// Configures preemption from the runtime config. Called once at start,
/// before sysmon and the signal handler run.
pub(crate) fn init(cfg: &crate::Config) {
    MODE.store(
        u8::from(cfg.preempt_mode == PreemptMode::Migrate),
        Ordering::Relaxed,
    );
    PINNED_MAX.store(cfg.preempt_pinned_max, Ordering::Relaxed);
    let static_libc = cfg.preempt && libc_is_static();
    STATIC_LIBC.store(static_libc, Ordering::Relaxed);
    ASYNC_ENABLED.store(cfg.preempt && !static_libc, Ordering::Relaxed);
    ASYNC_ONLY.store(cfg.async_preempt_only, Ordering::Relaxed);
    DETECT_ENABLED.store(cfg.detect_blocking, Ordering::Relaxed);
    find_text();
}

/// Whether preempted Gs stay on their M.
#[inline]
pub(crate) fn pinned_mode() -> bool {
    MODE.load(Ordering::Relaxed) == 0
}

/// Records the main executable's executable PT_LOAD segments (the first
/// object dl_iterate_phdr reports is the executable itself).
fn find_text() {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        _data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration.
        let info = unsafe { &*info };
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: i < dlpi_phnum.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let a = info.dlpi_addr as usize + ph.p_vaddr as usize;
                lo = lo.min(a);
                hi = hi.max(a + ph.p_memsz as usize);
            }
        }
        if hi > lo {
            TEXT_LO.store(lo, Ordering::Relaxed);
            TEXT_HI.store(hi, Ordering::Relaxed);
        }
        1 // the first object only
    }
    // SAFETY: cb matches the callback signature and touches only statics.
    unsafe { libc::dl_iterate_phdr(Some(cb), core::ptr::null_mut()) };
}

/// Whether libc is part of the executable (static glibc, `+crt-static`, or
/// musl's default static linking): no loaded object is a shared libc. The
/// pc check then cannot tell libc's code from the program's, and a
/// goroutine stopped inside `malloc` (an arena lock held) or stdio would
/// keep libc's locks while it waits, pinned, for a P: the thread that
/// must create an M for that P allocates, blocks on the lock, and the
/// program hangs (h32: 3 of 3 runs of 32 allocating goroutines at one P
/// with 100 µs slices). Async preemption is then off, as with
/// `GODEBUG=asyncpreemptoff=1` (`Stats::async_preempt_static_libc`).
/// Go never stops a goroutine inside C code: cgo calls run on the system
/// stack, outside the goroutine.
fn libc_is_static() -> bool {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration;
        // a non-null name is a NUL-terminated string.
        let name = unsafe {
            let p = (*info).dlpi_name;
            if p.is_null() {
                return 0;
            }
            core::ffi::CStr::from_ptr(p).to_bytes()
        };
        let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
        if base.starts_with(b"libc.so") || base.starts_with(b"ld-musl") {
            // SAFETY: data is the &mut bool passed below.
            unsafe { *data.cast::<bool>() = true };
            return 1;
        }
        0
    }
    let mut shared = false;
    // SAFETY: cb matches the callback signature and writes only `shared`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut shared as *mut bool).cast()) };
    !shared
}

/// Whether `pc` may be interrupted: in the executable's text, outside
/// goro's assembly. Async-signal-safe.
#[inline]
fn pc_is_safe(pc: usize) -> bool {
    let (alo, ahi) = crate::arch::asm_range();
    pc >= TEXT_LO.load(Ordering::Relaxed)
        && pc < TEXT_HI.load(Ordering::Relaxed)
        && !(pc >= alo && pc < ahi)
}

/// Go's preemptone: ask the G running on `pp` to yield — the cooperative
/// flag, and SIGURG to its M unless a request is already pending. Any
/// thread (sysmon, stop-the-world). Returns whether a G was asked.
pub(crate) fn preemptone(pp: &crate::p::P) -> bool {
    request_p(pp, REQ_PREEMPT)
}

/// The first half of preemptone: the cooperative flag alone. sysmon asks
/// this way first and signals only if the G has not yielded a grace
/// period later (sysmon.rs, `PREEMPT_GRACE_NS`).
pub(crate) fn preempt_ask(pp: &crate::p::P) -> bool {
    request_p(pp, 0)
}

/// Whether the G running on `pp` has its preemption flag set (asked and
/// not yet yielded). Any thread; a racy snapshot.
pub(crate) fn preempt_pending(pp: &crate::p::P) -> bool {
    let gp = running_g(pp);
    // SAFETY: Gs are never freed; `preempt` is atomic.
    !gp.is_null() && unsafe { (*gp).preempt.load(Ordering::Relaxed) }
}

/// The G running on `pp`'s M, or null (no M, or the M on g0). Any thread;
/// racy: a stale G only gets a flag it clears at its next schedule.
fn running_g(pp: &crate::p::P) -> *mut G {
    let mp = pp.m.get();
    if mp.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: Ms are never freed. Acquire: pairs with execute's publish,
    // so the G's initialisation happens before our use (m.curg's doc).
    unsafe { (*mp).curg.get_acquire() }
}

/// preemptone with [`REQ_PREEMPT_OR_DETACH`], for a G that has not
/// yielded long after the first request (the caller's judgement: sysmon
/// after a slice of refusals, stop-the-world after 10 ms). Any thread.
pub(crate) fn preempt_or_detach(pp: &crate::p::P) -> bool {
    request_p(pp, REQ_PREEMPT_OR_DETACH)
}

/// [`request_m_req`] for the M running `pp`, if any.
fn request_p(pp: &crate::p::P, req: u32) -> bool {
    let mp = pp.m.get();
    // SAFETY: Ms are never freed.
    !mp.is_null() && request_m_req(unsafe { &*mp }, req)
}

/// Sets the flag of the G running on `m` and, if `signal` (and async
/// preemption is on), sends `m` SIGURG. Returns whether a G was asked.
pub(crate) fn request_m(m: &M, signal: bool) -> bool {
    request_m_req(m, if signal { REQ_PREEMPT } else { 0 })
}

/// [`request_m`] with the handler's request (0: the flag alone).
fn request_m_req(m: &M, req: u32) -> bool {
    // Acquire: as in running_g.
    let gp = m.curg.get_acquire();
    if gp.is_null() {
        return false;
    }
    // SAFETY: Gs are never freed.
    unsafe { (*gp).preempt.store(true, Ordering::Relaxed) };
    if req != 0 && ASYNC_ENABLED.load(Ordering::Relaxed) {
        signal_m(m, req);
    }
    true
}

/// Stores `req` for `m`'s handler and sends it SIGURG, unless a request is
/// already pending. Any thread.
pub(crate) fn signal_m(m: &M, req: u32) {
    // AcqRel pairs with the handler's swap: one signal per request.
    if m.preempt_req
        .compare_exchange(0, req, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Relaxed: see procid's doc (our caller found m's G with Acquire).
    let tid = m.procid.load(Ordering::Relaxed);
    if tid == 0 {
        // Relaxed: undoes our own CAS; nothing was published with it.
        m.preempt_req.store(0, Ordering::Relaxed);
        return;
    }
    PREEMPT_SIGNALS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: tgkill names our own thread group, so the signal reaches one
    // of this process's threads or none. The tid is stale if m's thread
    // exited (mexit, when a locked goroutine exits) after the load, and may
    // then be another of our threads: it gets a spurious SIGURG. goro's
    // handler acts on it only for that thread's own pending request
    // (which it would have had anyway), else passes it to the handler
    // installed before goro's, if any (by default SIGURG is ignored; it is
    // never relayed to goro::signal). Go's signalM has the same window.
    unsafe {
        libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGURG);
    }
}

/// The SIGURG handler's decision for a request of ours (signal_unix.rs).
/// Runs on the M's alternate signal stack, on the M's own thread:
/// async-signal-safe (atomics, plain loads and stores, a memcpy; no locks,
/// no allocation).
///
/// # Safety
/// `info`/`ctx` are the handler's arguments; `m` is this thread's M.
pub(crate) unsafe fn on_signal(
    m: &M,
    req: u32,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    let gp = m.curg.get();
    if gp.is_null() || m.locks.get() != 0 {
        refuse();
        return;
    }
    // SAFETY: curg is this M's running G; the handler interrupted it.
    let g = unsafe { &*gp };
    let Some(st) = g.stack.get() else {
        refuse();
        return;
    };
    // SAFETY: guaranteed by the caller.
    let (pc, sp) = unsafe { crate::arch::uc_pc_sp(ctx) };
    if sp > st.hi || sp < st.lo + STACK_HEADROOM {
        refuse();
        return;
    }
    let status = g.status();
    let (alo, ahi) = crate::arch::asm_range();
    if pc >= alo && pc < ahi {
        // Mid-switch, or at the trampoline's rt_sigreturn.
        refuse();
        return;
    }
    if req == REQ_DETACH {
        let pp = m.p.get();
        // SAFETY: ctx is the interrupted user context.
        if status != GStatus::Running || pp.is_null() || !unsafe { crate::arch::uc_in_syscall(ctx) }
        {
            refuse();
            return;
        }
        // SAFETY: this thread owns its M, its running G and its P, and the
        // interrupted code is not in a runtime critical section.
        detach(m, g, unsafe { &*pp });
        return;
    }
    let detached = m.detached.load(Ordering::Relaxed);
    // The kernel builds the frame on this M's signal stack (minit), where
    // `inject` copies it from, unless the thread's alternate stack has
    // been switched off or replaced: std's `process::exit` does that on
    // the calling thread (its cleanup calls sigaltstack(SS_DISABLE)), and
    // so may user code or a library with signal stacks of its own. The
    // copy would then be computed from the wrong stack (h15: SIGSEGV in
    // every run of an exit with a slow atexit handler beside spinners).
    // Such a thread cannot be preempted here: it is treated as running
    // foreign code (refused, and detached once sysmon escalates), and
    // detaching (above) copies nothing and still works there.
    let (ss_lo, ss_size) = m.gsignal.get();
    let frame = crate::arch::sigframe_start(info, ctx);
    let off_stack = frame < ss_lo || frame >= ss_lo + ss_size;
    // A context that blocks signals this thread does not block normally
    // is a signal handler's (the kernel blocks the handled signal, and
    // the handler's sa_mask, while it runs) or code that asked not to be
    // interrupted. A user's handler without SA_ONSTACK runs on the G's
    // stack, in the executable: the pc check passes, yet it may have
    // interrupted malloc or stdio holding their locks, and the G stopped
    // there would sleep pinned with them (h44: a goroutine was preempted
    // inside a slow SIGUSR1 handler for another to run). Go never stops a
    // goroutine in a handler. Treated as foreign code: refused, and the P
    // detached once sysmon escalates.
    // SAFETY: ctx is the interrupted user context.
    let masked = unsafe { crate::arch::uc_sigmask(ctx) } & !m.sigmask.get() != 0;
    let foreign = off_stack || masked || !pc_is_safe(pc);
    if req == REQ_PREEMPT_OR_DETACH
        && status == GStatus::Running
        && !detached
        && foreign
        // Still asked (wantAsyncPreempt, below): not a G that yielded since.
        && g.preempt.load(Ordering::Relaxed)
    {
        let pp = m.p.get();
        if !pp.is_null() {
            // The G has computed outside the executable (or on a thread
            // without goro's signal stack) for a whole slice past its own
            // (a loop of std::fs::read or of large memcpys):
            // signals land there nearly every time, and no syscall is
            // blocked for blocking detection to see. Detach as REQ_DETACH
            // does; a thread running in libc is no different to the
            // scheduler from one blocked in it. Its running on without a P
            // is one thread more than GOMAXPROCS, as a G in a cgo call is
            // in Go.
            // SAFETY: as for REQ_DETACH: this thread owns its M, its running
            // G and its P; m.locks == 0 and the pc is not in asm/.
            detach(m, g, unsafe { &*pp });
            return;
        }
    }
    let eligible = match status {
        GStatus::Running => ASYNC_ENABLED.load(Ordering::Relaxed),
        // A detached G computing without a P: send it to reacquire one.
        // As the other stops, only where async preemption is on: with
        // libc linked in the stop could land inside `malloc` holding its
        // arena lock (h38: hung 6 of 6 with one arena), and
        // asyncpreemptoff asks for no stop at an arbitrary instruction.
        GStatus::Syscall => detached && ASYNC_ENABLED.load(Ordering::Relaxed),
        _ => false,
    };
    if !eligible || foreign {
        if eligible {
            m.foreign_refusals.fetch_add(1, Ordering::Relaxed);
        }
        refuse();
        return;
    }
    // Go's wantAsyncPreempt: the request is for a G whose `preempt` flag is
    // still set. A G that reached a check point (a channel operation, a
    // lock) after sysmon set the flag yielded there and cleared it, and
    // the signal then finds the next G running with the flag clear.
    // Stopping it would preempt a G that nobody asked to stop, at an
    // arbitrary instruction, possibly while it holds a lock of its own
    // (measured: a Cond queue at GOMAXPROCS=1 ran 1.7x slower with lock
    // holders stopped this way). Not refused: nothing is left to retry; if
    // the P still runs too long, sysmon asks again at its next tick.
    // Relaxed: sysmon's store happens before its signal_m CAS, which our
    // swap of preempt_req acquired; a clear by this thread is program order.
    if status == GStatus::Running && !detached && !g.preempt.load(Ordering::Relaxed) {
        return;
    }
    // Migrate mode pins too while the G unwinds a panic: std's panic
    // count is thread-local (panicking() reads an atomic, then a
    // const-initialised thread-local: no locks, signal-safe).
    if (pinned_mode() || std::thread::panicking())
        && g.lockedm.get().is_null()
        && status == GStatus::Running
    {
        // Reserve a pinned M; released when the G runs again (execute).
        if PINNED.fetch_add(1, Ordering::Relaxed) >= PINNED_MAX.load(Ordering::Relaxed) {
            PINNED.fetch_sub(1, Ordering::Relaxed);
            PREEMPT_PINNED_LIMIT.fetch_add(1, Ordering::Relaxed);
            return;
        }
        g.pinned.set(Pin::Preempted);
    }
    m.foreign_refusals.store(0, Ordering::Relaxed);
    // The trampoline and async_preempt run in a critical section that
    // async_preempt's mcall (or reacquire) ends: no nested preemption.
    m.locks.set(1);
    // SAFETY: the frame lies on this M's altstack; the destination is on
    // the G's stack below the interrupted sp and red zone, with the
    // headroom checked above.
    unsafe { inject(m, info, ctx, sp) };
}

fn refuse() {
    PREEMPT_REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Go's entersyscall on behalf of the interrupted G (blocked in the kernel,
/// or computing in foreign code): sysmon's retake hands the P off at its
/// next tick, and the G reacquires one at its next runtime entry. Handler
/// only; the caller owns `m`, its running `g` and its P `pp`, outside any
/// runtime critical section.
fn detach(m: &M, g: &G, pp: &crate::p::P) {
    crate::syscall::reentersyscall(m, g, pp);
    m.detached.store(true, Ordering::Relaxed);
    RETAKES_DETECTED.fetch_add(1, Ordering::Relaxed);
}

/// Copies the kernel's signal frame below `sp` (and the red zone) and
/// redirects the context to the trampoline.
///
/// # Safety
/// As in on_signal, after its checks.
unsafe fn inject(m: &M, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, sp: usize) {
    let (ss_lo, ss_size) = m.gsignal.get();
    let start = crate::arch::sigframe_start(info, ctx);
    let end = ss_lo + ss_size;
    let len = end - start;
    let a = crate::arch::FRAME_ALIGN;
    // Same offset modulo FRAME_ALIGN as the original (the xsave area and
    // the frame's own alignment), below the red zone.
    let mut dst = (sp - crate::arch::RED_ZONE - len) & !(a - 1);
    dst += start & (a - 1);
    if dst + len > sp - crate::arch::RED_ZONE {
        dst -= a;
    }
    // SAFETY: [start, end) is the kernel's frame on our altstack;
    // [dst, dst + len) is free stack of the interrupted G (below its sp
    // and red zone, above lo + headroom).
    unsafe {
        core::ptr::copy_nonoverlapping(start as *const u8, dst as *mut u8, len);
        crate::arch::sigframe_relocate(dst, dst as isize - start as isize);
        crate::arch::uc_redirect(
            ctx,
            crate::arch::async_preempt_pc(),
            (dst - 64) & !15,
            dst,
            async_preempt as *const () as usize,
        );
    }
}

/// Rust half of the trampoline, on the preempted G's stack: park the G
/// (or reacquire a P for a detached one), and when it is resumed return
/// the frame copy for rt_sigreturn. Never unwinds.
///
/// Returns inside a runtime critical section, which the trampoline ends
/// just before rt_sigreturn: the altstack written into the frame must be
/// the one of the thread that returns through it.
///
/// errno is thread-local memory that rt_sigreturn does not restore: the
/// interrupted code may be between a failing libc call and its read of
/// errno, and this thread (or, in migrate mode, the thread the G resumes
/// on) runs the scheduler meanwhile. It is saved here and written back on
/// whichever thread the G resumes.
extern "C" fn async_preempt(frame: usize) -> usize {
    let errno = crate::os::errno();
    // The handler entered a critical section for us (m.locks = 1), so no
    // second preemption can land before the G is parked.
    let mp = getm();
    // SAFETY: a user G of this thread's M (the handler checked).
    let (m, gp) = unsafe { (&*mp, (*mp).curg.get()) };
    // SAFETY: as above.
    let g = unsafe { &*gp };
    if m.detached.load(Ordering::Relaxed) {
        // A detached G computing: take a P back before running on, on
        // this thread if it must wait for one (reacquire_locked pins it).
        reacquire_locked(mp);
    } else {
        crate::sysmon::PREEMPTIONS.fetch_add(1, Ordering::Relaxed);
        PREEMPTIONS_ASYNC.fetch_add(1, Ordering::Relaxed);
        g.preempt.store(false, Ordering::Relaxed);
        if crate::trace::on() {
            crate::trace::preempt(g.goid.get(), true);
        }
        if g.pinned.get() == Pin::Preempted {
            // The handler reserved a pinned M: wire the G to this M.
            pin(m, gp, Pin::Preempted);
        }
        // mcall takes over our acquirem (gopreempt_m releases it on g0).
        crate::park::mcall_locked(crate::park::gopreempt_m);
    }
    // Resumed: possibly on another M (migrate mode). rt_sigreturn installs
    // the frame's altstack: make it this M's, inside a critical section
    // that the trampoline ends.
    let mp = crate::m::acquirem();
    // SAFETY: this thread's M, ours inside the section.
    let (ss, size) = unsafe { (*mp).gsignal.get() };
    // SAFETY: frame is our copy, untouched since the handler.
    unsafe { crate::arch::sigframe_set_altstack(frame, ss, size) };
    // SAFETY: this thread's errno slot, computed afresh on the thread the
    // G resumed on (os::errno_location: LLVM would reuse the entry's).
    unsafe { *crate::os::errno_location() = errno };
    frame
}

/// Wires `gp` to `m` until it runs again (the lock_os_thread mechanism
/// with `pinned` set to `why`, cleared by execute). A `Pin::Preempted` pin
/// was counted in PINNED by the handler.
fn pin(m: &M, gp: *mut G, why: Pin) {
    // SAFETY: the running G of this M.
    let g = unsafe { &*gp };
    g.pinned.set(why);
    g.lockedm.set(m as *const M as *mut M);
    m.lockedg.set(gp);
}

/// After a reacquire that did not need to wait: drop the pin at once.
fn unpin_if_running_here(gp: *mut G) {
    // SAFETY: the running G.
    let g = unsafe { &*gp };
    if g.pinned.get() != Pin::No {
        let _ml = crate::m::MLock::new();
        // SAFETY: this thread's M (pinned to it, and inside the section).
        let m = unsafe { &*getm() };
        unpin(m, g);
    }
}

/// Clears a runtime pin (`pinned` not `Pin::No`) of `g` on `m`, and
/// releases its PINNED reservation if it had one. The G's owner only.
pub(crate) fn unpin(m: &M, g: &G) {
    if g.pinned.replace(Pin::No) == Pin::Preempted {
        PINNED.fetch_sub(1, Ordering::Relaxed);
    }
    g.lockedm.set(core::ptr::null_mut());
    m.lockedg.set(core::ptr::null_mut());
}

/// Exits the implicit syscall of a G whose M blocking detection detached:
/// reacquire a P before running on. Called at runtime entries on a user G,
/// before any runtime lock is taken (cheap when not detached: an
/// acquirem/releasem and two loads). Inside a critical section it does nothing: the
/// G goes on as if in a syscall (no P: waits block the thread) until the
/// next entry.
#[inline]
pub(crate) fn reacquire() {
    crate::m::releasem(acquirem_with_p());
}

/// Enters a runtime critical section (acquirem) holding the G's P: a G
/// that blocking detection detached takes its P back first, inside the
/// section, so that `m.p` read afterwards stays the G's until releasem.
/// Returns the M (null on a plain thread). Nested inside another section
/// a detached G stays detached (m.p null), as with [`reacquire`].
#[inline]
pub(crate) fn acquirem_with_p() -> *mut M {
    loop {
        let mp = crate::m::acquirem();
        if mp.is_null() {
            return mp;
        }
        // SAFETY: this thread's M; inside the section no signal changes it.
        let m = unsafe { &*mp };
        if !m.detached.load(Ordering::Relaxed) || m.curg.get().is_null() || m.locks.get() != 1 {
            return mp;
        }
        // Ends the section; the G may continue on another M: enter again.
        reacquire_locked(mp);
    }
}

/// The reacquire itself, inside the critical section `mp` (which it ends):
/// the detached state is re-checked, cleared and exited with no window for
/// a signal in between.
///
/// The G resumes on this thread, in both modes: if it must wait for a P
/// it is pinned here (`Pin::Required`) and this M sleeps until one is
/// handed to it. The user wrote no switch point: the blocking call was
/// unwrapped, and the runtime entry that ends it may be one that never
/// parks (`WaitGroup::done`, a `Cond` notify), with a thread-local
/// borrow, a `tracing` span or std's stdout lock held across it.
/// Before (h44), only the handler's path (a detached G found
/// computing) pinned; a cooperative entry queued the G for any M, and 10
/// of 10 goroutines that called `WaitGroup::done` after an unwrapped
/// `std::thread::sleep`, beside a yielding loop at GOMAXPROCS=1, went on
/// on another thread (test `preempt::detached_goroutine_keeps_its_thread`).
#[cold]
fn reacquire_locked(mp: *mut M) {
    // SAFETY: this thread's M.
    let m = unsafe { &*mp };
    let gp = m.curg.get();
    if gp.is_null() || !m.detached.load(Ordering::Relaxed) {
        crate::m::releasem(mp);
        return;
    }
    m.detached.store(false, Ordering::Relaxed);
    REACQUIRES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: curg is this M's running G (we run on it, inside the
    // section).
    if unsafe { (*gp).lockedm.get() }.is_null() {
        pin(m, gp, Pin::Required);
    }
    crate::syscall::exitsyscall_locked(mp);
    // Resumed on this M: a slow exit was unpinned by execute, a fast one
    // (the old P, or an idle one, at once) is unpinned here.
    unpin_if_running_here(gp);
}

/// Parks-while-unwinding guard: a G that parks while
/// `std::thread::panicking()` must resume on the same M (std keeps the panic
/// count in thread-local state), and that M must run nothing else
/// meanwhile. Pins the running G to its M; execute unpins it. User G, in a
/// runtime critical section.
pub(crate) fn pin_if_panicking(m: &M, gp: *mut G) {
    // SAFETY: the running G.
    let g = unsafe { &*gp };
    if g.lockedm.get().is_null() && std::thread::panicking() {
        pin(m, gp, Pin::Required);
    }
}
