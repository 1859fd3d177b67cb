//! Execution trace (Go's runtime/trace), written as Chrome trace-event
//! JSON (loads in chrome://tracing and Perfetto).
//!
//! Layout of the file: one process, one track (`tid`) per P, named `P0`,
//! `P1`, ...; each stretch of a goroutine running on a P is a complete
//! event (`"ph":"X"`, name `G7`); instant events (`"ph":"i"`) on the same
//! tracks for `spawn` (args: new goroutine id), `park` (args: goroutine id,
//! Go's wait reason), `unpark` (args: goroutine id readied), `preempt`
//! (args: goroutine id, `coop` or `async`), `steal` (args: victim P),
//! `syscall enter` / `syscall exit` (args: goroutine id; a guarded
//! blocking call, Go's GoSysCall/GoSysExit; the exit on the track of the P
//! the goroutine resumes on) and `syscall handoff` (args: the P, on its
//! track: the P was taken from the goroutine in a syscall on it, whose
//! slice ends there; Go's GoSysBlock). Events from threads without a P (a plain thread
//! readying or spawning a goroutine, sysmon) go to a track `tid = -1` named
//! `no P`. Timestamps are µs since `start`.
//!
//! Usage: [`start`] and [`stop`], or `GORO_TRACE=path`; the recipe
//! (open the file at ui.perfetto.dev) and the overhead figures are in
//! docs/OBSERVABILITY.md. Recording costs 16 bytes of memory per event
//! until [`stop`] writes the file.

// # Recording (Go's per-P trace buffers, made per thread)
//
// Each thread that records (an M, sysmon, a plain thread) owns a
// `ThreadBuf`, found through a `const` thread-local (one TLS load), and
// appends fixed-size `Event`s to its current `Chunk` with no lock and
// no read-modify-write: the slot is written, then the chunk's `len` is
// stored with Release. A full chunk goes to the global `FULL` list (the
// only lock, taken once per `CHUNK_EVENTS` events) and the thread
// starts a new one. `stop` reads every chunk of the stopped generation up
// to its Acquire-loaded `len`; a writer that read `GEN` just before
// `stop` cleared it may append one more event, which is lost (events
// racing `start`/`stop` may be dropped, as before).
//
// Generations instead of clearing: `GEN` is 0 while off and the running
// trace's number while on. A chunk remembers the generation its events
// belong to; its owner resets it (len 0, then the new generation, Release)
// the first time it records for a new trace, so only the owner ever
// writes `len`, and `stop` ignores chunks of other generations. A thread's
// emits read `GEN` in order, so an emit never sees its chunk in a later
// generation than the one it read, provided no goroutine moves between
// threads inside `emit` (hence the acquirem rule below); should one
// (h34: `start`'s first counter sample ran outside a critical section),
// an emit of an older generation drops its event instead of resetting
// the chunk, which would lose the running trace's events in it.
//
// Slices are not stored as such: `execute` records a `Begin` (P, G) and
// `park`, `preempt`, a yield, an exit or the next `Begin` end it; `stop` replays each
// thread's events in order to build the complete events (an M runs one G
// at a time, so a thread's slices never interleave).
//
// Syscalls (Go's GoSysBlock/GoSysExit, per thread): a goroutine in a
// syscall stays on its M, but its P may be taken meanwhile (sysmon's
// retake, `enter_syscall_block`, stop-the-world) and run other goroutines,
// so its slice must end on that P at the hand-off, an event of another
// thread. Whoever takes the P records `SyscallHandoff` on it before
// handing it on; the exit records, once it has a P again, whether it took
// its own P back untouched (`SyscallExit`: the slice goes on) or lost it
// (`SyscallExitLost`: the slice ended; a new one begins on the P it got).
// `stop` then ends the slice at the first hand-off of the P after the
// slice began (`SyscallIndex`), or at the first slice another M began on
// the P, for a P taken without an event (stop-the-world). An exit that
// took its P back from another goroutine's syscall (the P was retaken and
// ran a goroutine that then entered a syscall; Go's
// exitsyscallfast_reacquired) records that goroutine's hand-off as well,
// and its own loss: it sees the P's `syscalltick` moved by more than the
// two of its call since the slice began or its last call (each thread
// keeps the value, `ThreadBuf::sys`; also for a detach, which records
// nothing at entry).
//
// Clock: events are stamped with the CPU's counter (`rdtsc` on x86_64
// when the kernel's clocksource is the TSC, i.e. the kernel found it
// synchronised across CPUs; `cntvct_el0` on aarch64; `nanotime`
// otherwise), converted to ns at `stop` from two (counter, `nanotime`)
// pairs taken at `start` and `stop` (Go's cputicks and ticksPerSecond).
// A counter read costs ~18 ns here against ~40 ns for the vDSO
// `clock_gettime`; a thread-ring hop records three events (unpark, park,
// Begin), each with one counter read.
//
// When tracing is off every hook is one Relaxed load and a branch: the
// hot ones (gopark, goready, execute) test a copy of the flag in the M
// they hold (`M::trace`), the others the global; `schedule` itself has no
// hook (the paths into it that did not park or preempt end the slice).

use crate::lock_futex::RtMutex as Mutex;
use crate::waitreason::WaitReason;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The running trace's generation, 0 while off (the hooks' fast check).
/// Relaxed: hooks may miss or add a few events around start/stop; each
/// chunk's `gen`/`len` (Release/Acquire) order the events themselves.
static GEN: AtomicU64 = AtomicU64::new(0);
/// The last generation `start` used (under `OUT`'s lock; Relaxed: the lock
/// orders it).
static LAST_GEN: AtomicU64 = AtomicU64::new(0);
/// Whether [`ticks`] reads the TSC (x86_64). Written by `start` before
/// `GEN`; Relaxed: a straggler using the other clock only misplaces an
/// event that is dropped anyway.
static USE_TSC: AtomicBool = AtomicBool::new(false);
/// (`nanotime()`, [`ticks`]) at `start`, under `OUT`'s lock.
static T0: Mutex<(i64, u64)> = Mutex::new((0, 0));
/// While tracing, the output path (for messages) and the file `start`
/// created there, which `stop` writes: a relative path keeps meaning the
/// directory it named at `start` if the program changes directory (h45:
/// `stop` re-created the path, so the trace went to the new directory and
/// the file created at `start` stayed empty). Start/stop serialise on it.
static OUT: Mutex<Option<(PathBuf, std::fs::File)>> = Mutex::new(None);
/// Every registered thread's buffer: the head of the list linked through
/// `ThreadBuf::next`.
static BUFS: Mutex<BufPtr> = Mutex::new(BufPtr(ptr::null()));
/// Full chunks, handed over by their owners and freed by `stop`: the head
/// of the list linked through `Chunk::next`.
static FULL: Mutex<ChunkPtr> = Mutex::new(ChunkPtr(ptr::null_mut()));

// Recording never uses the global allocator: buffers, chunks and the lists
// above come from the OS, and the lists are linked through their members.
// Events are recorded on g0 of a thread whose goroutine was preempted
// asynchronously, possibly inside the global allocator (a Rust allocator
// is code of the executable): allocating there would re-enter it while the
// interrupted call has its per-thread state half-updated (docs/
// PREEMPTION.md; test preempt_alloc).

/// `len` bytes aligned to `align` (a power of two, at least a page) from
/// the OS, zeroed; null if the OS refuses.
fn os_alloc(len: usize, align: usize) -> *mut u8 {
    let total = len + align;
    // SAFETY: a fresh private anonymous mapping; nothing else is touched.
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return ptr::null_mut();
    }
    let base = base as usize;
    let start = (base + align - 1) & !(align - 1);
    // SAFETY: the head [base, start) and the tail past start + len are
    // parts of our own mapping that nothing uses (page-aligned: align and
    // len are multiples of the page size).
    unsafe {
        if start > base {
            libc::munmap(base as *mut libc::c_void, start - base);
        }
        let end = start + len;
        if base + total > end {
            libc::munmap(end as *mut libc::c_void, base + total - end);
        }
    }
    start as *mut u8
}

/// Returns memory from [`os_alloc`].
///
/// # Safety
/// `p` came from `os_alloc(len, _)` and nothing uses it any more.
unsafe fn os_free(p: *mut u8, len: usize) {
    // SAFETY: per the contract.
    unsafe { libc::munmap(p.cast(), len) };
}

/// A page-aligned, page-rounded home for a `T` from [`os_alloc`], holding
/// `v`; null if the OS refuses.
fn os_box<T>(v: T) -> *mut T {
    let page = crate::os::page_size();
    let len = (core::mem::size_of::<T>() + page - 1) & !(page - 1);
    let p = os_alloc(len, page).cast::<T>();
    if !p.is_null() {
        // SAFETY: fresh memory, large and aligned enough for a T.
        unsafe { p.write(v) };
    }
    p
}

/// Drops and unmaps a value from [`os_box`].
///
/// # Safety
/// `p` came from `os_box` and nothing uses it any more.
unsafe fn os_unbox<T>(p: *mut T) {
    let page = crate::os::page_size();
    let len = (core::mem::size_of::<T>() + page - 1) & !(page - 1);
    // SAFETY: per the contract.
    unsafe {
        p.drop_in_place();
        os_free(p.cast(), len);
    }
}

/// Bytes per chunk: 2 MiB, aligned and `MADV_HUGEPAGE`, so that writing
/// it costs one page fault where transparent huge pages are on (4 KiB
/// pages cost one fault per 256 events, ~10 ns per event here).
const CHUNK_BYTES: usize = 2 << 20;
/// Events per chunk: 131,072 × 16 bytes.
const CHUNK_EVENTS: usize = CHUNK_BYTES / core::mem::size_of::<Event>();

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// `execute` started goroutine `arg` on P `p`: opens a slice.
    Begin,
    /// The M's goroutine yielded, exited or left a syscall without a P:
    /// closes the open slice.
    End,
    Spawn,
    /// Goroutine `arg` parks with `reason`; closes the slice.
    Park,
    Unpark,
    /// `arg` preempted cooperatively (at a runtime entry); closes the slice.
    PreemptCoop,
    /// `arg` preempted asynchronously (SIGURG); closes the slice.
    PreemptAsync,
    /// Goroutine `arg` entered a guarded blocking call (Go's GoSysCall).
    SyscallEnter,
    /// Goroutine `arg` returned from it with its P `p` kept: its slice
    /// goes on (Go's GoSysExit).
    SyscallExit,
    /// P `arg` (the P id) was taken from the goroutine in a syscall on it
    /// (sysmon's retake, `enter_syscall_block`, or an exit that took the P
    /// back from another goroutine's syscall): that goroutine's slice on
    /// the P ends here (Go's GoSysBlock and ProcStop).
    SyscallHandoff,
    /// A G took work from P `arg` (the victim's id).
    Steal,
    /// Scheduler counters sampled by sysmon: `arg` packs the runnable Gs
    /// (global and local queues, bits 0–27) and the idle Ps (28–39).
    Counters,
    /// netpoll made `arg` goroutines runnable.
    Netpoll,
    /// The stack scavenger returned `arg` free stacks to the OS.
    Scavenge,
    /// Goroutine `arg` returned from a syscall during which it lost its P
    /// (a `SyscallHandoff` on that P, or a stop-the-world): its slice there
    /// has ended; it goes on in a new slice on P `p` (none if -1: it
    /// waits in the global queue, and `execute` begins its next slice).
    SyscallExitLost,
}

impl Kind {
    /// Every kind, indexed by its discriminant.
    const ALL: [Kind; 15] = [
        Kind::Begin,
        Kind::End,
        Kind::Spawn,
        Kind::Park,
        Kind::Unpark,
        Kind::PreemptCoop,
        Kind::PreemptAsync,
        Kind::SyscallEnter,
        Kind::SyscallExit,
        Kind::SyscallHandoff,
        Kind::Steal,
        Kind::Counters,
        Kind::Netpoll,
        Kind::Scavenge,
        Kind::SyscallExitLost,
    ];
}

/// One recorded event: 16 bytes. `ts` is in [`ticks`]; `word` packs the
/// kind (bits 0–5), the wait reason (6–11), the P plus one (12–23, 0 for
/// none) and the argument (24–63: a goroutine id, a P id or a count).
#[derive(Clone, Copy)]
struct Event {
    ts: u64,
    word: u64,
}

impl Event {
    #[inline(always)]
    fn pack(kind: Kind, p: i32, arg: u64, reason: WaitReason) -> u64 {
        kind as u64 | (reason as u64) << 6 | ((p + 1) as u64 & 0xfff) << 12 | arg << 24
    }
    fn kind(self) -> Kind {
        Kind::ALL[(self.word & 0x3f) as usize]
    }
    fn reason(self) -> WaitReason {
        WaitReason::from_u8((self.word >> 6 & 0x3f) as u8)
    }
    fn p(self) -> i32 {
        (self.word >> 12 & 0xfff) as i32 - 1
    }
    fn arg(self) -> u64 {
        self.word >> 24
    }
}

/// A block of events written by one thread.
struct Chunk {
    /// Generation of the events in it. Written only by the owner, after
    /// resetting `len` (Release), so a reader that sees its generation
    /// (Acquire) sees the reset too.
    gen: AtomicU64,
    /// Events written. Stored only by the owner (Release, after writing the
    /// slot); `stop` reads slots below an Acquire load of it.
    len: AtomicUsize,
    /// Registration index of the owner's buffer and this chunk's place
    /// among its chunks: `stop` replays a thread's events in order.
    owner: usize,
    seq: u64,
    /// `CHUNK_EVENTS` slots, initialised below `len`.
    ev: *mut Event,
    /// The next chunk in `FULL` (under its lock).
    next: Cell<*mut Chunk>,
}

impl Chunk {
    /// A new chunk, or null if memory is exhausted (the event is dropped).
    /// From the OS, not the global allocator (`os_alloc`).
    fn alloc(owner: usize, seq: u64, gen: u64) -> *mut Chunk {
        let ev = os_alloc(CHUNK_BYTES, CHUNK_BYTES);
        if ev.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: ev..ev+CHUNK_BYTES is ours and 2 MiB aligned; the advice
        // only changes how it is backed (failure is harmless).
        unsafe { libc::madvise(ev.cast(), CHUNK_BYTES, libc::MADV_HUGEPAGE) };
        let c = os_box(Chunk {
            gen: AtomicU64::new(gen),
            len: AtomicUsize::new(0),
            owner,
            seq,
            ev: ev.cast(),
            next: Cell::new(ptr::null_mut()),
        });
        if c.is_null() {
            // SAFETY: ev came from os_alloc above and is not used.
            unsafe { os_free(ev, CHUNK_BYTES) };
        }
        c
    }

    /// The events of generation `gen` written so far (empty for another
    /// generation). The owner may go on writing slots past the end.
    fn events(&self, gen: u64) -> &[Event] {
        if self.gen.load(Ordering::Acquire) != gen {
            return &[];
        }
        let n = self.len.load(Ordering::Acquire);
        // SAFETY: slots below `n` were written before the Release store of
        // `len` that the Acquire load saw, and are not written again in
        // this generation (the owner writes only at `len` and above).
        unsafe { core::slice::from_raw_parts(self.ev, n) }
    }

    /// # Safety
    /// `c` came from [`Chunk::alloc`] and no thread uses it any more.
    unsafe fn free(c: *mut Chunk) {
        // SAFETY: per the contract; `ev` and `c` came from `alloc`.
        unsafe {
            os_free((*c).ev.cast(), CHUNK_BYTES);
            os_unbox(c);
        }
    }
}

/// One thread's recording state.
struct ThreadBuf {
    idx: usize,
    /// The chunk being written. Stored by the owner only (Release, after
    /// handing the previous one to `FULL`); loaded by `stop` (Acquire).
    cur: AtomicPtr<Chunk>,
    /// Owner only: the next chunk's `seq`.
    nseq: Cell<u64>,
    /// Owner only: a slice is open (a `Begin` not yet ended), so
    /// `schedule` must record its end.
    open: Cell<bool>,
    /// Owner only: (generation, goroutine id, its P's `syscalltick`) for
    /// the open slice: set when it begins, advanced by each syscall of the
    /// goroutine that keeps the P, for `syscall_exit` to tell whether the P
    /// it took back was retaken and re-entered meanwhile; zeros when
    /// unknown (no slice of this trace, or one begun without `Begin`).
    sys: Cell<(u64, u64, u32)>,
    /// Set (Release) by the owner's thread-exit destructor; `stop` (Acquire)
    /// may then free the buffer and its chunk.
    dead: AtomicBool,
    /// The next buffer in `BUFS` (under its lock).
    next: Cell<*const ThreadBuf>,
}

/// The head of `BUFS`.
struct BufPtr(*const ThreadBuf);
// SAFETY: the buffers' owner-only Cells are touched only by their owners,
// `next` only under BUFS's lock; other threads use their atomics (see
// ThreadBuf).
unsafe impl Send for BufPtr {}
/// The head of `FULL`.
struct ChunkPtr(*mut Chunk);
// SAFETY: a full chunk is no longer written but for `next`, under FULL's
// lock; only `stop` reads and frees it.
unsafe impl Send for ChunkPtr {}

/// `TBUF` of a thread whose destructor ran: record nothing.
const DEAD: *const ThreadBuf = ptr::NonNull::<ThreadBuf>::dangling().as_ptr();

thread_local! {
    /// This thread's buffer; null until its first event. `const` and
    /// without a destructor, so reading it is one TLS load.
    static TBUF: Cell<*const ThreadBuf> = const { Cell::new(ptr::null()) };
    /// Marks the buffer dead at thread exit (touched once, at registration).
    static EXIT: ExitGuard = const { ExitGuard };
}

struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let _ = TBUF.try_with(|c| {
            let tb = c.replace(DEAD);
            if !tb.is_null() && tb != DEAD {
                // SAFETY: our buffer; only `stop` frees it, after this.
                unsafe { (*tb).dead.store(true, Ordering::Release) };
            }
        });
    }
}

/// The trace clock: the CPU's counter where usable, else `nanotime`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ticks() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        // SAFETY: rdtsc has no preconditions; user mode may execute it on
        // Linux (the kernel's own vDSO clock uses it when the clocksource
        // is the TSC, which `start` checked).
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    crate::os::nanotime() as u64
}

/// The trace clock: the virtual counter (CNTVCT_EL0).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn ticks() -> u64 {
    let v: u64;
    // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux (the kernel sets
    // CNTKCTL_EL1.EL0VCTEN; its vDSO relies on it); no side effects.
    unsafe {
        core::arch::asm!("mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Whether tracing is on (the hooks' fast check).
#[inline]
pub(crate) fn on() -> bool {
    GEN.load(Ordering::Relaxed) != 0
}

/// Whether tracing is on, for a hook that holds `mp` (this thread's M, or
/// null on a plain thread): the M's copy of the flag where there is one.
#[inline]
pub(crate) fn on_m(mp: *const crate::m::M) -> bool {
    // SAFETY: this thread's M (alive forever) or null.
    match unsafe { mp.as_ref() } {
        Some(m) => m.trace.load(Ordering::Relaxed),
        None => on(),
    }
}

/// Sets every M's copy of the flag (after the global changed).
fn set_all_m(on: bool) {
    for &mp in crate::sched::ALLM.lock().iter() {
        // SAFETY: M structs are never freed.
        unsafe {
            (*(mp as *const crate::m::M))
                .trace
                .store(on, Ordering::Relaxed)
        };
    }
}

fn cur_p() -> i32 {
    p_id(crate::m::getp())
}

/// The id of P `pp`, or -1 for none.
fn p_id(pp: *const crate::p::P) -> i32 {
    // SAFETY: Ps are never freed; the id is immutable.
    unsafe { pp.as_ref() }.map_or(-1, |p| p.id as i32)
}

/// Appends an event stamped now to this thread's buffer. Not inlined: the
/// thread-local's address must not be cached across a goroutine switch
/// (lib.rs docs). Callers on a user G are inside an acquirem section (no
/// asynchronous preemption can interleave a second writer on this thread,
/// or move the caller to another thread between its read of `GEN` and its
/// write); the others run on g0, sysmon or a plain thread. Never from a
/// signal handler.
#[inline(never)]
fn emit(kind: Kind, p: i32, arg: u64, reason: WaitReason) {
    let gen = GEN.load(Ordering::Relaxed);
    if gen == 0 {
        return;
    }
    emit_gen(gen, kind, p, arg, reason);
}

/// [`emit`] for generation `gen`, which the caller read from `GEN` (not 0).
#[inline(always)]
fn emit_gen(gen: u64, kind: Kind, p: i32, arg: u64, reason: WaitReason) {
    let mut tb = TBUF.with(Cell::get);
    if tb.is_null() {
        tb = register();
    }
    if tb == DEAD {
        return;
    }
    // SAFETY: this thread's buffer, freed only after this thread is dead;
    // its Cells are ours.
    let tb = unsafe { &*tb };
    match kind {
        Kind::Begin => tb.open.set(true),
        Kind::End | Kind::Park | Kind::PreemptCoop | Kind::PreemptAsync => tb.open.set(false),
        // A new slice on the P the goroutine got back, if any.
        Kind::SyscallExitLost => tb.open.set(p >= 0),
        _ => {}
    }
    let ev = Event {
        ts: ticks(),
        word: Event::pack(kind, p, arg, reason),
    };
    // Relaxed: `cur` and `len` are stored only by this thread.
    let c = tb.cur.load(Ordering::Relaxed);
    if !c.is_null() {
        // SAFETY: our current chunk: only we free or hand it over.
        let c = unsafe { &*c };
        let n = c.len.load(Ordering::Relaxed);
        if n < CHUNK_EVENTS && c.gen.load(Ordering::Relaxed) == gen {
            // SAFETY: slot n < CHUNK_EVENTS is ours alone until `len`
            // covers it; `stop` reads only below `len`.
            unsafe { c.ev.add(n).write(ev) };
            c.len.store(n + 1, Ordering::Release);
            return;
        }
    }
    emit_slow(tb, gen, ev);
}

/// The first event of a generation on this chunk, or a full chunk.
#[cold]
fn emit_slow(tb: &ThreadBuf, gen: u64, ev: Event) {
    let c = tb.cur.load(Ordering::Relaxed);
    // c, if not null, is this thread's current chunk: only this thread
    // frees it or hands it over (as in `emit`).
    let cgen = if c.is_null() {
        0
    } else {
        // SAFETY: see above.
        unsafe { (*c).gen.load(Ordering::Relaxed) }
    };
    if cgen > gen {
        // The caller read `GEN` before a `stop`, and the chunk already
        // holds events of a later trace, written on this thread after
        // that read: by a goroutine that ran here while the caller's
        // goroutine, preempted, moved here from another thread. The event
        // belongs to a stopped trace; resetting the chunk as a stale one
        // (below) would drop the running trace's events (h34).
        return;
    }
    let stale = !c.is_null() && cgen < gen;
    let c = if stale {
        // Left from an earlier trace: reuse it. `stop` of that trace has
        // finished (start/stop serialise), and a reader of this
        // generation that sees `gen` sees `len` reset first.
        // SAFETY: as above; only the owner writes `len` and `gen`.
        unsafe {
            (*c).len.store(0, Ordering::Relaxed);
            (*c).gen.store(gen, Ordering::Release);
        }
        c
    } else {
        if !c.is_null() {
            let mut full = FULL.lock();
            // SAFETY: our full chunk, handed over here: its `next` is
            // written only under FULL's lock from now on.
            unsafe { (*c).next.set(full.0) };
            full.0 = c;
        }
        let seq = tb.nseq.get();
        tb.nseq.set(seq + 1);
        let nc = Chunk::alloc(tb.idx, seq, gen);
        tb.cur.store(nc, Ordering::Release);
        if nc.is_null() {
            return;
        }
        nc
    };
    // SAFETY: our chunk, empty for this generation.
    unsafe {
        (*c).ev.write(ev);
        (*c).len.store(1, Ordering::Release);
    }
}

/// Registers this thread's buffer (first event on this thread).
#[cold]
fn register() -> *const ThreadBuf {
    if EXIT.try_with(|_| ()).is_err() {
        // Thread-locals are being destroyed: record nothing from here on.
        TBUF.with(|c| c.set(DEAD));
        return DEAD;
    }
    static NEXT_IDX: AtomicUsize = AtomicUsize::new(0);
    let tb = os_box(ThreadBuf {
        // Relaxed: a unique number is all that is needed.
        idx: NEXT_IDX.fetch_add(1, Ordering::Relaxed),
        cur: AtomicPtr::new(ptr::null_mut()),
        nseq: Cell::new(0),
        open: Cell::new(false),
        sys: Cell::new((0, 0, 0)),
        dead: AtomicBool::new(false),
        next: Cell::new(ptr::null()),
    });
    if tb.is_null() {
        // No memory from the OS: this thread records nothing.
        TBUF.with(|c| c.set(DEAD));
        return DEAD;
    }
    {
        let mut bufs = BUFS.lock();
        // SAFETY: our fresh buffer; `next` is written under BUFS's lock.
        unsafe { (*tb).next.set(bufs.0) };
        bufs.0 = tb;
    }
    TBUF.with(|c| c.set(tb));
    tb
}

/// `execute` is about to run goroutine `goid` on P `p` (g0).
#[cold]
pub(crate) fn slice_begin(p: usize, goid: u64) {
    emit(Kind::Begin, p as i32, goid, WaitReason::Zero);
    // The P is ours (execute holds it): its syscalltick moves only with
    // our goroutine's syscalls until one loses it.
    set_slice_tick(goid, crate::sched::allp(p));
}

/// Records (`ThreadBuf::sys`) that goroutine `goid` now holds P `pp`, or
/// that nothing is known (`pp` null).
fn set_slice_tick(goid: u64, pp: *const crate::p::P) {
    let tb = TBUF.with(Cell::get);
    if tb.is_null() || tb == DEAD {
        return;
    }
    // SAFETY: Ps are never freed.
    let v = match unsafe { pp.as_ref() } {
        // Relaxed: the P is ours; nobody else changes its tick while we
        // hold it (sysmon's retake increments it only after taking it).
        Some(p) => (
            GEN.load(Ordering::Relaxed),
            goid,
            p.syscalltick.load(Ordering::Relaxed),
        ),
        None => (0, 0, 0),
    };
    // SAFETY: this thread's live buffer; its Cells are ours.
    unsafe { (*tb).sys.set(v) };
}

/// The M's goroutine stopped running without a park or preemption event
/// (yield, exit, a syscall exit that found no P): ends its slice (g0).
/// Reads no clock when no slice is open.
#[cold]
pub(crate) fn slice_end() {
    let tb = TBUF.with(Cell::get);
    // SAFETY: this thread's live buffer (not null, not DEAD).
    if tb.is_null() || tb == DEAD || !unsafe { (*tb).open.get() } {
        return;
    }
    emit(Kind::End, -1, 0, WaitReason::Zero);
}

fn instant(kind: Kind, arg: u64, reason: WaitReason) {
    emit(kind, cur_p(), arg, reason);
}

/// A goroutine `goid` was created.
#[cold]
pub(crate) fn spawn(goid: u64) {
    instant(Kind::Spawn, goid, WaitReason::Zero);
}

/// The running goroutine `goid` parks with `reason` on P `p` (the
/// caller's `m.p`, read without another TLS lookup).
#[cold]
pub(crate) fn park(p: *const crate::p::P, goid: u64, reason: WaitReason) {
    emit(Kind::Park, p_id(p), goid, reason);
}

/// Goroutine `goid` was readied (or resumed at once: its park's unlock
/// function refused) by a thread holding P `p` (null: none).
#[cold]
pub(crate) fn unpark(p: *const crate::p::P, goid: u64) {
    emit(Kind::Unpark, p_id(p), goid, WaitReason::Zero);
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

/// Goroutine `goid` enters a guarded blocking call on P `p` (inside the
/// guard's critical section, before the P is marked in a syscall).
#[cold]
pub(crate) fn syscall_enter(p: usize, goid: u64) {
    emit(Kind::SyscallEnter, p as i32, goid, WaitReason::Zero);
}

/// Goroutine `goid` returned from a syscall (guarded, or a detach by
/// blocking detection) and now holds P `now` (null: none, it goes to the
/// global queue). `oldp` is the P it held when it entered (null if it gave
/// it up then: `enter_syscall_block`); `kept`: it took `oldp` back with
/// the CAS from Syscall (Go's exitsyscallfast with oldp). The event goes
/// on `now`'s track. In an acquirem section, after the P was acquired.
#[cold]
pub(crate) fn syscall_exit(
    oldp: *const crate::p::P,
    now: *const crate::p::P,
    kept: bool,
    goid: u64,
) {
    let tb = TBUF.with(Cell::get);
    let (gen, id, tick) = if tb.is_null() || tb == DEAD {
        (0, 0, 0)
    } else {
        // SAFETY: this thread's live buffer; its Cells are ours.
        unsafe { (*tb).sys.get() }
    };
    // The goroutine's P and its tick are known for a slice that began in
    // this trace (with `Begin`, or at a lost P's exit); else no check.
    let known = gen != 0 && gen == GEN.load(Ordering::Relaxed) && id == goid;
    let mut lost = !kept;
    if kept && known {
        // SAFETY: `kept`: oldp is not null; Ps are never freed.
        let p = unsafe { &*oldp };
        // A P kept untouched moved by exactly two (reentersyscall and
        // exitsyscallfast; also for a detach by blocking detection); more
        // means sysmon retook it, another goroutine ran on it and is now
        // in a syscall on it, whose P our CAS took (Go's
        // exitsyscallfast_reacquired). Both goroutines lost the P: record
        // the hand-off of the other one (ours was recorded by whoever
        // retook it). Relaxed: our CAS (AcqRel) acquired the status from
        // the P's last owner, after every increment, and nobody else
        // changes it while we hold the P.
        if p.syscalltick.load(Ordering::Relaxed) != tick.wrapping_add(2) {
            emit(
                Kind::SyscallHandoff,
                p.id as i32,
                p.id as u64,
                WaitReason::Zero,
            );
            lost = true;
        }
    }
    // For the next exit: a kept P goes on if it was known; a lost P's
    // exit starts anew on the P it got.
    set_slice_tick(goid, if known || lost { now } else { ptr::null() });
    let kind = if lost {
        Kind::SyscallExitLost
    } else {
        Kind::SyscallExit
    };
    emit(kind, p_id(now), goid, WaitReason::Zero);
}

/// P `p` was taken from the goroutine in a syscall on it (sysmon's
/// retake of a guarded or detected call, or `enter_syscall_block`): its
/// slice there ends now. Before the P is handed to another M.
#[cold]
pub(crate) fn syscall_handoff(p: usize) {
    emit(Kind::SyscallHandoff, p as i32, p as u64, WaitReason::Zero);
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
    let arg = (runnable as u64).min((1 << 28) - 1) | (idle_ps as u64 & 0xfff) << 28;
    emit(Kind::Counters, -1, arg, WaitReason::Zero);
}

/// Samples the scheduler counters now ([`counters`]): sysmon's periodic
/// sample, and one at each end of a trace so that the counter track has a
/// value from start to stop however briefly tracing ran.
pub(crate) fn sample_counters() {
    let s = crate::sched::snapshot();
    counters(
        s.global_runq + s.local_runq.iter().sum::<usize>(),
        s.idle_procs,
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

/// Whether the kernel's clocksource is the TSC (then it found the TSC
/// synchronised and invariant across CPUs, and so may we).
fn tsc_usable() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// Starts recording an execution trace to `path` (created or truncated
/// now and kept open: [`stop`] writes into that file, so a relative path
/// means the working directory of this call). Go's `trace.Start`.
///
/// Errors: the file cannot be created, or a trace is already running
/// (`ErrorKind::AlreadyExists`, Go's "tracing is already enabled").
/// Starts the runtime if needed. Does not block.
pub fn start(path: impl AsRef<Path>) -> io::Result<()> {
    crate::ensure_started();
    start_inner(path.as_ref())?;
    // Inside a critical section, as every emit on a user G must be (h34:
    // this one was not). Preempted between its read of `GEN` and its
    // write, the goroutine could resume on another M and write that
    // thread's chunk beside its owner, or, after a `stop` and `start`
    // meanwhile, reset it as stale and lose the new trace's events there.
    let _ml = crate::m::MLock::new();
    sample_counters();
    Ok(())
}

/// Test hook (h34): records one counter event on the calling thread as an
/// `emit` that read `GEN` before the last `stop` would, i.e. with the
/// previous trace's generation. Returns false, recording nothing, unless
/// a trace runs that had a predecessor. The event must not be recorded,
/// and the thread's events of the running trace must survive it.
#[doc(hidden)]
pub fn __emit_stale_generation() -> bool {
    let _ml = crate::m::MLock::new();
    let gen = GEN.load(Ordering::Relaxed);
    if gen < 2 {
        return false;
    }
    emit_gen(gen - 1, Kind::Counters, -1, 0, WaitReason::Zero);
    true
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
    let file = std::fs::File::create(path)?;
    USE_TSC.store(tsc_usable(), Ordering::Relaxed);
    *T0.lock() = (crate::os::nanotime(), ticks());
    *out = Some((path.to_path_buf(), file));
    let gen = LAST_GEN.load(Ordering::Relaxed) + 1;
    LAST_GEN.store(gen, Ordering::Relaxed);
    GEN.store(gen, Ordering::Relaxed);
    set_all_m(true);
    Ok(())
}

/// One event of the file, after replay: `ts`/`dur` in ns since start.
struct Out {
    ts: i64,
    dur: i64,
    p: i32,
    arg: u64,
    kind: Kind,
    reason: WaitReason,
}

/// Stops tracing and writes the trace into the file [`start`] created
/// (Chrome trace-event JSON, see the module docs). Go's `trace.Stop`.
/// Blocks while writing.
///
/// Errors: writing the file failed, or no trace is running
/// (`ErrorKind::NotFound`).
pub fn stop() -> io::Result<()> {
    stop_inner(true)
}

/// [`stop`] for a process about to `_exit` (deadlock report, SIGQUIT
/// dump), which skips exit()'s handlers: writes the file without the
/// closing counter sample, which needs `sched.lock` (the deadlock check
/// holds it).
///
/// A file that cannot be written is reported on stderr, as the atexit
/// handler does (h31: the fatal paths said nothing), with write(2) on fd 2:
/// a parked goroutine may hold std's stderr lock.
pub(crate) fn stop_at_fatal() {
    let Some(path) = OUT.lock().as_ref().map(|(p, _)| p.clone()) else {
        return; // not tracing
    };
    if let Err(e) = stop_inner(false) {
        let from_env = std::env::var_os("GORO_TRACE").is_some_and(|p| Path::new(&p) == path);
        let msg = format!(
            "goro: {}{}: cannot write the trace file: {e}\n",
            if from_env { "GORO_TRACE=" } else { "trace " },
            path.display()
        );
        crate::dump::write_stderr(msg.as_bytes());
    }
}

/// Per P, sorted by time, where a goroutine's slice ends when its P was
/// taken during a syscall: the hand-offs (ticks), and the slices begun on
/// it — a `Begin`, or a lost P's exit onto it (ticks, and the thread's
/// registration index).
#[derive(Default)]
struct SyscallIndex {
    held: Vec<Vec<(u64, usize)>>,
    handoffs: Vec<Vec<u64>>,
}

impl SyscallIndex {
    fn new(runs: &[(usize, &[Event])]) -> SyscallIndex {
        let mut ix = SyscallIndex::default();
        for &(owner, r) in runs {
            for e in r {
                let Ok(p) = usize::try_from(e.p()) else {
                    continue;
                };
                match e.kind() {
                    // Slices begun: by `execute`, or at a lost P's exit.
                    Kind::Begin | Kind::SyscallExitLost => {
                        if ix.held.len() <= p {
                            ix.held.resize_with(p + 1, Vec::new);
                        }
                        ix.held[p].push((e.ts, owner));
                    }
                    Kind::SyscallHandoff => {
                        if ix.handoffs.len() <= p {
                            ix.handoffs.resize_with(p + 1, Vec::new);
                        }
                        ix.handoffs[p].push(e.ts);
                    }
                    _ => {}
                }
            }
        }
        for v in &mut ix.held {
            v.sort_unstable();
        }
        for v in &mut ix.handoffs {
            v.sort_unstable();
        }
        ix
    }

    /// For a goroutine of thread `owner` whose slice on P `p` began at
    /// `t0` and that returned from a syscall at `t1` (ticks): where it lost
    /// the P, if it did before `t1` — the first hand-off of the P after
    /// `t0`, or the first slice another thread began on it (a P taken
    /// without a hand-off event: by a stop-the-world) — else None.
    /// While the goroutine holds its P (running, or in a syscall nobody
    /// retook) neither happens; the previous holder's hand-off and slices
    /// precede `t0`.
    fn lost_at(&self, owner: usize, p: i32, t0: u64, t1: u64) -> Option<u64> {
        let p = usize::try_from(p).ok()?;
        let h = self.handoffs.get(p).and_then(|v| {
            v.get(v.partition_point(|&t| t <= t0))
                .copied()
                .filter(|&t| t < t1)
        });
        let o = self.held.get(p).and_then(|v| {
            v[v.partition_point(|&(t, _)| t <= t0)..]
                .iter()
                .take_while(|&&(t, _)| t < t1)
                .find(|&&(_, o)| o != owner)
                .map(|&(t, _)| t)
        });
        match (h, o) {
            (Some(h), Some(o)) => Some(h.min(o)),
            (h, o) => h.or(o),
        }
    }
}

fn stop_inner(sample: bool) -> io::Result<()> {
    // Critical section: the trace locks are also taken on g0 of this M.
    let _ml = crate::m::MLock::new();
    let mut out = OUT.lock();
    let Some((_, file)) = out.take() else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "goro::trace: tracing is not enabled",
        ));
    };
    // The counters' closing value (lock order: OUT, then sched.lock).
    if sample {
        sample_counters();
    }
    let gen = GEN.swap(0, Ordering::Relaxed);
    set_all_m(false);
    let (ns1, tk1) = (crate::os::nanotime(), ticks());
    let (ns0, tk0) = *T0.lock();
    // ns per tick (1 when ticks are nanotime).
    let scale = if tk1 > tk0 {
        (ns1 - ns0) as f64 / (tk1 - tk0) as f64
    } else {
        1.0
    };
    let ns = |tk: u64| ((tk as f64 - tk0 as f64) * scale).max(0.0) as i64;

    // Every chunk that may hold this generation's events: the live
    // threads' current ones (read only), the dead threads' and the full
    // ones (ours to free once read). A current chunk may also have been
    // handed to FULL meanwhile: read each once.
    let mut read: Vec<*mut Chunk> = Vec::new();
    let mut owned: Vec<*mut Chunk> = Vec::new();
    {
        let mut bufs = BUFS.lock();
        // The link to the buffer at hand: the list's head, then the
        // previous live buffer's `next`.
        let mut prev: Option<&ThreadBuf> = None;
        let mut b = bufs.0;
        while !b.is_null() {
            // SAFETY: registered buffers are freed only here, once dead,
            // under BUFS's lock.
            let tb = unsafe { &*b };
            let next = tb.next.get();
            let dead = tb.dead.load(Ordering::Acquire);
            let c = tb.cur.load(Ordering::Acquire);
            if !c.is_null() {
                read.push(c);
                if dead {
                    owned.push(c);
                }
            }
            if dead {
                match prev {
                    Some(p) => p.next.set(next),
                    None => bufs.0 = next,
                }
                // SAFETY: its thread is gone and it is unlinked: nothing
                // else references it.
                unsafe { os_unbox(b.cast_mut()) };
            } else {
                prev = Some(tb);
            }
            b = next;
        }
    }
    {
        let mut full = FULL.lock();
        let mut c = core::mem::replace(&mut full.0, ptr::null_mut());
        while !c.is_null() {
            owned.push(c);
            // SAFETY: a full chunk, ours now; freed only below.
            c = unsafe { (*c).next.get() };
        }
    }
    owned.sort_unstable();
    owned.dedup();
    read.extend(owned.iter().copied());
    read.sort_unstable();
    read.dedup();
    // SAFETY: every chunk in `read` stays allocated until freed below.
    let mut chunks: Vec<&Chunk> = read.iter().map(|&c| unsafe { &*c }).collect();
    chunks.sort_unstable_by_key(|c| (c.owner, c.seq));

    // Each chunk's events, read once: both passes below see the same.
    let runs: Vec<(usize, &[Event])> = chunks.iter().map(|c| (c.owner, c.events(gen))).collect();
    // Built at the first need: a syscall exit, or a slice still open when
    // the trace stopped (its goroutine may be in a syscall whose P was
    // taken; nothing on its own thread says so).
    let index = core::cell::OnceCell::new();
    let syscalls = || index.get_or_init(|| SyscallIndex::new(&runs));

    // Replay each thread's events in order into slices and instants. The
    // open slice keeps its start in ticks for `SyscallIndex`.
    let mut evs: Vec<Out> = Vec::new();
    let mut open: Option<(usize, Out, u64)> = None;
    let close = |open: &mut Option<(usize, Out, u64)>, evs: &mut Vec<Out>, end: i64| {
        if let Some((_, mut s, _)) = open.take() {
            s.dur = (end - s.ts).max(0);
            evs.push(s);
        }
    };
    let end = ns(tk1);
    // A slice open at the end of its thread's events lasts until the stop,
    // unless its goroutine lost the P meanwhile (in a syscall that had not
    // returned): then it ends there, as at a lost exit.
    let close_at_stop =
        |open: &mut Option<(usize, Out, u64)>, evs: &mut Vec<Out>, syscalls: &SyscallIndex| {
            let cut = open
                .as_ref()
                .and_then(|(o, s, t0)| syscalls.lost_at(*o, s.p, *t0, tk1));
            close(open, evs, cut.map_or(end, ns));
        };
    for &(owner, run) in &runs {
        if open.as_ref().is_some_and(|(o, _, _)| *o != owner) {
            close_at_stop(&mut open, &mut evs, syscalls());
        }
        for e in run {
            let ts = ns(e.ts);
            let o = Out {
                ts,
                dur: 0,
                p: e.p(),
                arg: e.arg(),
                kind: e.kind(),
                reason: e.reason(),
            };
            match o.kind {
                Kind::Begin => {
                    close(&mut open, &mut evs, ts);
                    open = Some((owner, o, e.ts));
                }
                Kind::End => close(&mut open, &mut evs, ts),
                Kind::Park | Kind::PreemptCoop | Kind::PreemptAsync => {
                    close(&mut open, &mut evs, ts);
                    evs.push(o);
                }
                Kind::SyscallExit | Kind::SyscallExitLost => {
                    // The slice ends where the goroutine lost its P, if it
                    // did: the exit says so, or (a loss the exit could not
                    // see) the P was handed off or began another slice
                    // while the goroutine was in the call.
                    let cut = open
                        .as_ref()
                        .and_then(|(_, s, t0)| syscalls().lost_at(owner, s.p, *t0, e.ts));
                    let lost = o.kind == Kind::SyscallExitLost || cut.is_some();
                    if lost {
                        let cut = cut.map_or(ts, ns);
                        close(&mut open, &mut evs, cut);
                        if o.p >= 0 {
                            let s = Out {
                                kind: Kind::Begin,
                                ..o
                            };
                            open = Some((owner, s, e.ts));
                        }
                    }
                    evs.push(o);
                }
                _ => evs.push(o),
            }
        }
    }
    if open.is_some() {
        close_at_stop(&mut open, &mut evs, syscalls());
    }
    drop(chunks);
    for c in owned {
        // SAFETY: handed over (full) or left by a dead thread: no writer,
        // and `read`'s references are gone.
        unsafe { Chunk::free(c) };
    }
    // Unstable: a thread's own stamps never tie, and ties across threads
    // have no order to keep.
    evs.sort_unstable_by_key(|e| e.ts);
    write_file(file, &evs)
}

/// ns printed as µs with three decimals (integer arithmetic: float
/// formatting dominated writing a large trace).
struct Us(i64);

impl core::fmt::Display for Us {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Writes the replayed events as Chrome trace-event JSON into `file`
/// (the one `start` created, still empty).
fn write_file(file: std::fs::File, events: &[Out]) -> io::Result<()> {
    let mut ps: Vec<i32> = events.iter().map(|e| e.p).collect();
    ps.sort_unstable();
    ps.dedup();
    // Streamed event by event (a million-event trace as a serde_json
    // Value tree takes minutes); every string written is a fixed ASCII
    // literal or a number, so no escaping is needed, and serde_json still
    // writes the names.
    let mut f = io::BufWriter::with_capacity(1 << 20, file);
    f.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    let mut first = true;
    for p in ps {
        let name = if p < 0 {
            "no P".to_string()
        } else {
            format!("P{p}")
        };
        if !std::mem::take(&mut first) {
            f.write_all(b",\n")?;
        }
        write!(
            f,
            r#"{{"name":"thread_name","ph":"M","pid":1,"tid":{p},"args":{{"name":{}}}}}"#,
            serde_json::to_string(&name)?
        )?;
    }
    for e in events {
        if e.kind == Kind::End {
            continue; // replay turned every End into a slice's duration
        }
        if !std::mem::take(&mut first) {
            f.write_all(b",\n")?;
        }
        let (tid, ts, g) = (e.p, Us(e.ts), e.arg);
        // An instant event on the P's track with the given args.
        macro_rules! inst {
            ($name:literal, $($args:tt)*) => {
                write!(
                    f,
                    concat!(r#"{{"name":""#, $name, r#"","ph":"i","s":"t","pid":1,"tid":{},"ts":{},"args":{{"#),
                    tid,
                    ts
                )
                .and_then(|()| write!(f, $($args)*))
                .and_then(|()| f.write_all(b"}}"))
            };
        }
        match e.kind {
            Kind::Begin => write!(
                f,
                r#"{{"name":"G{g}","ph":"X","pid":1,"tid":{tid},"ts":{ts},"dur":{d},"args":{{"goid":{g}}}}}"#,
                d = Us(e.dur)
            )?,
            Kind::End => {}
            Kind::Spawn => inst!("spawn", r#""goid":{g}"#)?,
            Kind::Park => inst!(
                "park",
                r#""goid":{g},"reason":{}"#,
                serde_json::to_string(e.reason.as_str())?
            )?,
            Kind::Unpark => inst!("unpark", r#""goid":{g}"#)?,
            Kind::PreemptCoop => inst!("preempt", r#""goid":{g},"kind":"coop""#)?,
            Kind::PreemptAsync => inst!("preempt", r#""goid":{g},"kind":"async""#)?,
            Kind::SyscallEnter => inst!("syscall enter", r#""goid":{g}"#)?,
            Kind::SyscallExit | Kind::SyscallExitLost => inst!("syscall exit", r#""goid":{g}"#)?,
            Kind::SyscallHandoff => inst!("syscall handoff", r#""p":{g}"#)?,
            Kind::Steal => inst!("steal", r#""victim":{g}"#)?,
            Kind::Counters => write!(
                f,
                r#"{{"name":"scheduler","ph":"C","pid":1,"tid":{tid},"ts":{ts},"args":{{"runnable Gs":{},"idle Ps":{}}}}}"#,
                g & ((1 << 28) - 1),
                g >> 28
            )?,
            Kind::Netpoll => inst!("netpoll", r#""ready":{g}"#)?,
            Kind::Scavenge => inst!("stack scavenge", r#""stacks":{g}"#)?,
        }
    }
    f.write_all(b"]}\n")?;
    f.flush()
}

/// `GORO_TRACE=path`: start tracing at runtime start and write the file at
/// process exit (atexit), or at an explicit [`stop`]. A file that cannot
/// be created or written is reported on stderr (h27: silently no trace).
pub(crate) fn init_from_env() {
    let Some(path) = std::env::var_os("GORO_TRACE") else {
        return;
    };
    if path.is_empty() {
        return;
    }
    if let Err(e) = start_inner(Path::new(&path)) {
        // Not eprintln!: a closed stderr must not turn this into a panic.
        let _ = writeln!(
            io::stderr(),
            "goro: GORO_TRACE={}: cannot create the trace file: {e}",
            Path::new(&path).display()
        );
        return;
    }
    extern "C" fn at_exit() {
        // Not tracing: the program called `stop` itself (and got its result).
        if !on() {
            return;
        }
        if let Err(e) = stop() {
            let path = std::env::var_os("GORO_TRACE").unwrap_or_default();
            // Not eprintln!: a panic cannot unwind out of an atexit
            // handler (closed stderr would abort the exit).
            let _ = writeln!(
                io::stderr(),
                "goro: GORO_TRACE={}: cannot write the trace file: {e}",
                Path::new(&path).display()
            );
        }
    }
    // SAFETY: registering a plain extern "C" fn; it runs at exit() on the
    // exiting thread.
    unsafe { libc::atexit(at_exit) };
}
