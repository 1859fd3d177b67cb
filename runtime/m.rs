//! M: an OS thread. Go's `m` (runtime2.go), its g0 stack, the readers of
//! the runtime's one thread-local (the current M, kept in asm/), and the
//! futex note Ms sleep on.

use crate::atomic::{RelaxedI32, RelaxedPtr};
use crate::g::G;
use crate::p::P;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{compiler_fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

/// Maximum number of Ms (Go's sched.maxmcount default).
pub(crate) const MAX_M: i64 = 10_000;

/// Native stack size of an M's thread, which is its g0 stack (bytes).
pub(crate) const G0_STACK_SIZE: usize = 256 << 10;

/// Function run on g0 after gopark switches away: releases whatever the
/// parked G was holding; returning false resumes the G at once (Go's
/// gopark unlockf).
pub(crate) type UnlockFn = fn(gp: *mut G, arg: *mut u8) -> bool;

/// A one-shot wake-up flag with a futex (Go's note, lock_futex.go). One
/// sleeper; `clear` before reuse.
pub(crate) struct Note {
    /// 0 or 1 (woken). `wakeup`'s Release swap pairs with the sleeper's
    /// Acquire loads; `clear` is Relaxed (the sleeper's own).
    key: AtomicU32,
}

impl Note {
    pub(crate) const fn new() -> Note {
        Note {
            key: AtomicU32::new(0),
        }
    }

    /// Go's notewakeup. Any thread. Release pairs with the sleeper's Acquire:
    /// whatever the waker wrote before (e.g. m.nextp) is visible after wake.
    pub(crate) fn wakeup(&self) {
        if self.key.swap(1, Ordering::Release) != 0 {
            crate::throw::throw("notewakeup - double wakeup");
        }
        crate::os::futex_wake(&self.key, 1);
    }

    /// Go's notesleep: block the OS thread until `wakeup`.
    pub(crate) fn sleep(&self) {
        while self.key.load(Ordering::Acquire) == 0 {
            crate::os::futex_wait(&self.key, 0, None);
        }
    }

    /// Go's notetsleep: like `sleep` with a timeout; true if woken.
    pub(crate) fn sleep_timeout(&self, ns: i64) -> bool {
        let deadline = crate::os::nanotime().saturating_add(ns);
        loop {
            if self.key.load(Ordering::Acquire) != 0 {
                return true;
            }
            let now = crate::os::nanotime();
            if now >= deadline {
                return false;
            }
            crate::os::futex_wait(
                &self.key,
                0,
                Some(Duration::from_nanos((deadline - now) as u64)),
            );
        }
    }

    /// Go's noteclear. Only by the sleeper, when no wakeup is pending.
    pub(crate) fn clear(&self) {
        // Relaxed: the sleeper owns the note between wakeups.
        self.key.store(0, Ordering::Relaxed);
    }
}

/// Initial fastrand state of the M with id `id` (Go's mcommoninit: the id
/// hashed with the process's startup random bytes, and the clock), so
/// `select!` choices and steal orders differ between runs as in Go.
fn fastrand_seed(id: i64) -> u64 {
    // SAFETY: getauxval has no preconditions; AT_RANDOM, when present
    // (always on Linux), points at 16 random bytes the kernel placed on
    // the initial stack, readable for the process's life.
    let r = unsafe {
        let p = libc::getauxval(libc::AT_RANDOM) as *const u64;
        if p.is_null() {
            0
        } else {
            p.read_unaligned()
        }
    };
    let x = (id as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ r
        ^ (crate::os::nanotime() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64's finaliser.
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// An OS thread running goroutines. The struct is never freed: raw `*mut M`
/// are read racily by other threads (sysmon, stop-the-world). When its
/// thread exits (sched::mexit, after a locked G exits) the struct goes on a
/// free list and is reinitialised for a later M.
///
/// Fields are owned by the M's own thread unless they say otherwise.
pub(crate) struct M {
    /// M id (Go's m.id), 0-based in creation order; seeds fastrand.
    #[allow(dead_code)] // for scheddetail output
    pub(crate) id: i64,
    /// Base of this M's g0 stack: mcall switches here, discarding earlier
    /// g0 frames. 16-byte aligned. Set once in mstart.
    pub(crate) g0_sp: Cell<usize>,
    /// The user G running on this M, or null on g0. Written by the M;
    /// read racily by sysmon and stop-the-world (a stale value only makes a
    /// preemption request land on a G that clears it) and by the SIGURG
    /// handler on this thread. A G is stored with `publish` (Release) and
    /// read with `get_acquire` by the other threads that touch it
    /// (preemptone, scheddetail): the G's allocation (`G::alloc`, plain
    /// writes on whichever thread spawned it) then happens before their
    /// accesses. With Relaxed on both sides it did not: ThreadSanitizer
    /// reported preemptone's store to `g.preempt` racing the G's
    /// initialisation (docs/TESTING.md). The M's own reads stay Relaxed.
    pub(crate) curg: RelaxedPtr<G>,
    /// The attached P, or null. Written by the M (and by the SIGURG handler
    /// on this thread when it detaches a blocked M); read racily elsewhere.
    pub(crate) p: RelaxedPtr<P>,
    /// P handed over by startm: written under sched.lock before `park` is
    /// woken, read by this M after waking (the note orders them).
    pub(crate) nextp: Cell<*mut P>,
    /// P held before entering a syscall (Go's m.oldp).
    pub(crate) oldp: Cell<*mut P>,
    /// Whether this M is spinning (looking for work with a P); counted in
    /// sched.nmspinning. Written by the M, or by startm before waking it.
    pub(crate) spinning: Cell<bool>,
    /// Where this M sleeps when idle (stopm) and startm wakes it.
    pub(crate) park: Note,
    /// Link in sched's idle M list (under sched.lock).
    pub(crate) schedlink: Cell<*mut M>,
    /// CPU this M last went idle on (written by the M in stopm before it
    /// joins the idle list, read by startm under sched.lock, which orders
    /// the two); -1 unknown.
    pub(crate) idle_cpu: Cell<i32>,
    /// Kernel thread id, for tgkill and /proc (atomic: read by sysmon).
    /// Relaxed: stored by the M's thread in mstart before it runs any G,
    /// so a reader that found a G through `curg.get_acquire()` (execute's
    /// publish comes later) sees it; any other reader tolerates 0 (not
    /// started yet: no signal, no probe).
    pub(crate) procid: AtomicI32,
    /// Per-M random state (Go's m.fastrand).
    pub(crate) fastrand: Cell<u64>,
    /// gopark's unlock function and argument, consumed by park_m on g0.
    pub(crate) waitunlockf: Cell<Option<UnlockFn>>,
    pub(crate) waitlock: Cell<*mut u8>,
    /// Runtime critical sections entered and not left (Go's m.locks): >0
    /// forbids asynchronous preemption and blocking detection. Changed only
    /// by this M's thread through [`acquirem`]/[`releasem`]; read by the
    /// SIGURG handler on this thread and racily by sysmon.
    pub(crate) locks: RelaxedI32,
    /// A request from sysmon for this M's SIGURG handler (`PREEMPT_*`):
    /// set by sysmon with a CAS from 0 before it sends the signal, taken
    /// (swapped to 0) by the handler. AcqRel/Acquire: the handler must see
    /// the request only after sysmon's decision; nothing else rides on it.
    pub(crate) preempt_req: AtomicU32,
    /// Preemption signals the handler refused in a row because the pc was
    /// outside the executable (libc, the vDSO, another shared library):
    /// counted by the handler, reset by it when it preempts and by sysmon
    /// when it asks a new G. Relaxed: sysmon's read only decides whether to
    /// escalate to REQ_PREEMPT_OR_DETACH, which the handler re-checks.
    pub(crate) foreign_refusals: AtomicU32,
    /// sysmon's next probe of this M while it is detached (ns, nanotime),
    /// and the gap it backs off to: sysmon-only bookkeeping for
    /// `signal_detached_running`. Relaxed: only sysmon reads and writes it.
    pub(crate) detached_probe_at: AtomicI64,
    pub(crate) detached_probe_gap: AtomicI64,
    /// Set by the SIGURG handler when it detached this M's P because the M
    /// was blocked in the kernel in user code (an unguarded blocking call):
    /// the running G is then in an implicit syscall, and the next runtime
    /// entry reacquires a P (preempt::reacquire). Written by this thread
    /// only (handler or G); read by sysmon, for which Relaxed suffices (a
    /// stale value delays a reacquire signal by a tick).
    pub(crate) detached: AtomicBool,
    /// The G locked to this M by lock_os_thread (Go's m.lockedg): this M
    /// runs nothing else, and sleeps on `park` while that G is not running.
    pub(crate) lockedg: Cell<*mut G>,
    /// Retired: a locked G exited without unlocking; the thread never runs
    /// another goroutine and exits (sched::mexit, as Go terminates it).
    pub(crate) retired: Cell<bool>,
    /// Alternate signal stack (base, size), for the guard-page fault handler.
    pub(crate) gsignal: Cell<(usize, usize)>,
    /// The thread's blocked signals as minit left them (bit n - 1 for
    /// signal n): the SIGURG handler does not stop a goroutine whose
    /// interrupted context blocks more (preempt::on_signal). Written by
    /// minit, read by the handler, both on this M's thread.
    pub(crate) sigmask: Cell<u64>,
    /// Saved context of `mstart` on the thread's native stack (a `Gobuf`'s
    /// sp; 0 before mstart): `mexit` resumes it so mstart returns and the
    /// thread ends through its start function (Go's g0.sched as recorded in
    /// mstart1 for "terminating the thread"). Written once by mstart; read
    /// by the same thread on g0.
    pub(crate) mstart_buf: Cell<usize>,
    /// Tracing is on: this M's copy of `trace::on()` for the hot hooks
    /// (gopark, goready, schedule, execute), one byte load off the M they
    /// already hold instead of a global reached through the GOT. Written
    /// by trace::start/stop for every M in ALLM and by newm; Relaxed, as
    /// the global: hooks may miss or add events around start/stop.
    pub(crate) trace: AtomicBool,
    /// ThreadSanitizer's fibers of this thread and its g0 (zero-sized
    /// without `cfg(goro_tsan)`; see arch/fiber_tsan.rs). Owned by the M's
    /// thread: set in mstart, read at every switch on it.
    pub(crate) fibers: crate::arch::MFibers,
}

// SAFETY: an M is shared through raw pointers between its own thread and the
// scheduler; fields written by other threads (nextp, spinning) are written
// under sched.lock while the M sleeps and published by its note.
unsafe impl Sync for M {}
// SAFETY: as above.
unsafe impl Send for M {}

impl M {
    pub(crate) fn new(id: i64) -> *mut M {
        Box::into_raw(Box::new(M {
            id,
            g0_sp: Cell::new(0),
            curg: RelaxedPtr::new(ptr::null_mut()),
            p: RelaxedPtr::new(ptr::null_mut()),
            nextp: Cell::new(ptr::null_mut()),
            oldp: Cell::new(ptr::null_mut()),
            spinning: Cell::new(false),
            park: Note::new(),
            schedlink: Cell::new(ptr::null_mut()),
            idle_cpu: Cell::new(-1),
            procid: AtomicI32::new(0),
            fastrand: Cell::new(fastrand_seed(id)),
            waitunlockf: Cell::new(None),
            waitlock: Cell::new(ptr::null_mut()),
            locks: RelaxedI32::new(0),
            preempt_req: AtomicU32::new(0),
            foreign_refusals: AtomicU32::new(0),
            detached_probe_at: AtomicI64::new(0),
            detached_probe_gap: AtomicI64::new(0),
            detached: AtomicBool::new(false),
            lockedg: Cell::new(ptr::null_mut()),
            retired: Cell::new(false),
            gsignal: Cell::new((0, 0)),
            sigmask: Cell::new(0),
            mstart_buf: Cell::new(0),
            trace: AtomicBool::new(false),
            fibers: crate::arch::MFibers::new(),
        }))
    }

    /// Brings an M taken from the free list (sched::allocm) back to
    /// [`M::new`]'s values, keeping its id. Field by field, atomics with
    /// atomic stores: sysmon may still hold a stale pointer to this M (read
    /// from a P before the M exited) and read its atomic fields (`curg`,
    /// `locks`, `procid`, ...). Replacing the whole struct with a fresh one
    /// (`ptr::swap`, as allocm did) was a plain write racing those atomic
    /// reads; ThreadSanitizer reported it (docs/TESTING.md). The Cells are
    /// read racily only by the scheddetail dump, a documented racy
    /// diagnostic. The exhaustive pattern makes a field added to M fail to
    /// compile until it is reset here too.
    ///
    /// Only by allocm, on an M whose thread has returned from mstart.
    pub(crate) fn reset(&self) {
        let M {
            id,
            g0_sp,
            curg,
            p,
            nextp,
            oldp,
            spinning,
            park,
            schedlink,
            idle_cpu,
            procid,
            fastrand,
            waitunlockf,
            waitlock,
            locks,
            preempt_req,
            foreign_refusals,
            detached_probe_at,
            detached_probe_gap,
            detached,
            lockedg,
            retired,
            gsignal,
            sigmask,
            mstart_buf,
            trace,
            fibers: _, // set whole by MFibers::init in mstart before any use
        } = self;
        g0_sp.set(0);
        curg.set(ptr::null_mut());
        p.set(ptr::null_mut());
        nextp.set(ptr::null_mut());
        oldp.set(ptr::null_mut());
        spinning.set(false);
        park.clear();
        schedlink.set(ptr::null_mut());
        idle_cpu.set(-1);
        // Relaxed, these stores and the ones below: the M is not running;
        // its new thread is created after them (thread creation orders
        // them), and racy readers tolerate any value (the fields' docs).
        procid.store(0, Ordering::Relaxed);
        fastrand.set(fastrand_seed(*id));
        waitunlockf.set(None);
        waitlock.set(ptr::null_mut());
        locks.set(0);
        preempt_req.store(0, Ordering::Relaxed);
        foreign_refusals.store(0, Ordering::Relaxed);
        detached_probe_at.store(0, Ordering::Relaxed);
        detached_probe_gap.store(0, Ordering::Relaxed);
        detached.store(false, Ordering::Relaxed);
        lockedg.set(ptr::null_mut());
        retired.set(false);
        gsignal.set((0, 0));
        sigmask.set(0);
        mstart_buf.set(0);
        trace.store(false, Ordering::Relaxed);
    }

    /// Go's fastrand (wyrand).
    #[inline]
    pub(crate) fn fastrand(&self) -> u32 {
        let s = self.fastrand.get().wrapping_add(0xa076_1d64_78bd_642f);
        self.fastrand.set(s);
        let t = (s as u128).wrapping_mul((s ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) as u64 ^ t as u64) as u32
    }
}

// # Reading the current M under migrating preemption
//
// In [`PreemptMode::Migrate`](crate::PreemptMode) an asynchronously
// preempted goroutine may resume on another M. Go never preempts its
// runtime asynchronously (isAsyncSafePoint rejects runtime pcs); goro's
// runtime code is inlined into user functions, so no pc range can cover
// it. What must not migrate is narrower: a pointer to the M (and through
// it the P) read from the thread's slot before a preemption is another
// thread's after it; the G is the goroutine itself wherever it runs. So:
//
// - The slot (`goro_tls_m`) lives in asm/, with its readers: `goro_getm`,
//   `goro_getg` (the slot and `m.curg` in one sequence) and
//   `goro_acquirem` (the slot and `m.locks += 1`). The SIGURG handler
//   never preempts at a pc in asm/, and these call nothing, so each is
//   one step against migration whatever the optimisation level (Rust
//   readers relying on inlining were not: at opt-level 0 `LocalKey::with`
//   is a call).
// - Once `acquirem` has returned, `m.locks > 0` refuses every preemption
//   until `releasem`: the M and P read inside the section stay the G's.
//   The other readers below bracket their reads with it.
// - Outside a critical section, goroutine code may hold only its G.

// Untyped for the FFI boundary; the Rust wrappers restore the types.
extern "C" {
    fn goro_getm() -> *mut u8;
    fn goro_setm(mp: *mut u8);
    fn goro_getg() -> *mut u8;
    fn goro_acquirem() -> *mut u8;
}

/// The current M, or null on a plain OS thread. The M is the caller's
/// only on g0, on a plain thread, or inside a critical section: a user G
/// outside one must use [`acquirem`] or the readers below.
#[inline]
pub(crate) fn getm() -> *mut M {
    // SAFETY: reads this thread's slot (asm/); no preconditions.
    unsafe { goro_getm().cast() }
}

/// Sets the current M; only in mstart.
pub(crate) fn setm(mp: *mut M) {
    // SAFETY: writes this thread's slot (asm/); no preconditions.
    unsafe { goro_setm(mp.cast()) }
}

/// The P held by the current M, or null (plain thread, or an M without a
/// P: idle, in a syscall, sysmon). The P stays this M's only while the
/// caller is in a runtime critical section ([`acquirem`]) or on g0: a user
/// G may otherwise be preempted asynchronously and resume with another P.
#[inline]
pub(crate) fn getp() -> *mut P {
    let mp = acquirem();
    if mp.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: mp is this thread's M (inside the section), alive forever;
    // `p` is owned by it.
    let pp = unsafe { (*mp).p.get() };
    releasem(mp);
    pp
}

/// The running G, or null on g0 or a plain thread (Go's getg() with the
/// g0 case folded to null). One step against migration (asm/): the
/// result is the caller's own G wherever it resumes.
#[inline]
pub(crate) fn getg() -> *mut G {
    // SAFETY: reads this thread's slot and its M's curg (asm/).
    unsafe { goro_getg().cast() }
}

/// The running G as a *hint*: [`getg`] inlined, without its guarantee.
/// In migrating mode a preemption between the loads may make this another
/// M's current G (or null), so use it only to read a flag that the caller
/// re-checks on a path that uses [`getg`] (as `preempt_check` does).
/// Saves the call of [`getg`] where that matters: on every lock.
#[inline(always)]
pub(crate) fn getg_hint() -> *mut G {
    #[cfg(target_arch = "x86_64")]
    {
        let g: *mut G;
        // SAFETY: the sequence of asm/x86_64.S's LOAD_M and goro_getg
        // (initial-exec TLS slot, then m.curg if the slot is set): reads
        // this thread's slot and, through a non-null M (never freed), one
        // field.
        unsafe {
            core::arch::asm!(
                "mov {g}, qword ptr [rip + goro_tls_m@GOTTPOFF]",
                "mov {g}, qword ptr fs:[{g}]",
                "test {g}, {g}",
                "jz 2f",
                "mov {g}, qword ptr [{g} + {curg}]",
                "2:",
                g = out(reg) g,
                curg = const core::mem::offset_of!(M, curg),
                options(nostack, readonly),
            );
        }
        g
    }
    #[cfg(target_arch = "aarch64")]
    {
        let g: *mut G;
        // SAFETY: as on x86_64, with asm/aarch64.S's LOAD_M.
        unsafe {
            core::arch::asm!(
                "mrs {t}, tpidr_el0",
                "adrp {g}, :gottprel:goro_tls_m",
                "ldr {g}, [{g}, :gottprel_lo12:goro_tls_m]",
                "ldr {g}, [{t}, {g}]",
                "cbz {g}, 2f",
                "ldr {g}, [{g}, #{curg}]",
                "2:",
                g = out(reg) g,
                t = out(reg) _,
                curg = const core::mem::offset_of!(M, curg),
                options(nostack, readonly),
            );
        }
        g
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        getg()
    }
}

/// Go's fastrand: the current M's generator, or on a plain thread a
/// per-thread one (wyrand, as `M::fastrand`, seeded from the clock and the
/// thread-local's address so that runs and threads differ).
pub(crate) fn fastrand() -> u32 {
    let mp = acquirem();
    if !mp.is_null() {
        // SAFETY: this thread's M (inside the section); fastrand is touched
        // only by its thread.
        let r = unsafe { (*mp).fastrand() };
        releasem(mp);
        return r;
    }
    std::thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|s| {
        let mut v = s.get();
        if v == 0 {
            v = (crate::os::nanotime() as u64 ^ s as *const _ as u64) | 1;
        }
        v = v.wrapping_add(0xa076_1d64_78bd_642f);
        s.set(v);
        let t = (v as u128).wrapping_mul((v ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) as u64 ^ t as u64) as u32
    })
}

/// Go's acquirem: enter a runtime critical section on the current M (if
/// any): until the matching [`releasem`], the running G is never
/// preempted asynchronously nor detached by blocking detection, so the M
/// and P it reads stay its own. Returns the M (null on a plain thread).
/// Nests. Cheap: a call, a TLS read and an increment (asm/, one step
/// against migration).
#[inline]
pub(crate) fn acquirem() -> *mut M {
    // SAFETY: reads this thread's slot and increments its M's `locks`,
    // written only by this thread (the SIGURG handler on it only reads it).
    let mp: *mut M = unsafe { goro_acquirem().cast() };
    // The handler runs on this thread: a compiler fence keeps the
    // section's accesses after the increment in program order as the
    // handler sees it (Go relies on the same for m.locks).
    compiler_fence(Ordering::SeqCst);
    mp
}

/// Go's releasem: leave the critical section [`acquirem`] entered. `mp`
/// is what acquirem returned (the same M: the section cannot migrate).
#[inline]
pub(crate) fn releasem(mp: *mut M) {
    if !mp.is_null() {
        // As in acquirem: the section's accesses stay before the decrement.
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as in acquirem.
        let m = unsafe { &*mp };
        m.locks.set(m.locks.get() - 1);
    }
}

/// Whether this thread's M is inside a runtime critical section
/// ([`acquirem`]): code there must not park (it would sleep with
/// preemption and blocking detection off for its M, and release the
/// section on another thread if it resumed elsewhere).
#[inline]
pub(crate) fn in_critical_section() -> bool {
    locks() > 0
}

/// The current M's critical-section count, not counting this call's own
/// (0 on a plain thread).
pub(crate) fn locks() -> i32 {
    let mp = acquirem();
    if mp.is_null() {
        return 0;
    }
    // SAFETY: this thread's M; `locks` is written only by this thread.
    let n = unsafe { (*mp).locks.get() } - 1;
    releasem(mp);
    n
}

/// A lock held inside a runtime critical section (Go's lock(): never
/// preempted while held), from [`lock_rt`]. The guard is a field declared
/// before the section, so it is released first however the caller's
/// statement is shaped (a guard temporary in a block's tail would outlive
/// a separate `MLock` local).
pub(crate) struct RtGuard<'a, T> {
    guard: crate::lock_futex::RtMutexGuard<'a, T>,
    _ml: MLock,
}

/// Enters a runtime critical section and takes `m` in it.
#[inline]
pub(crate) fn lock_rt<T>(m: &crate::lock_futex::RtMutex<T>) -> RtGuard<'_, T> {
    let ml = MLock::new();
    RtGuard {
        guard: m.lock(),
        _ml: ml,
    }
}

impl<T> core::ops::Deref for RtGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> core::ops::DerefMut for RtGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// RAII form of [`acquirem`]/[`releasem`].
pub(crate) struct MLock(*mut M);

impl MLock {
    #[inline]
    pub(crate) fn new() -> MLock {
        MLock(acquirem())
    }

    /// Takes over a section already entered with `acquirem` (its `mp`),
    /// releasing it when dropped.
    #[inline]
    pub(crate) fn of(mp: *mut M) -> MLock {
        MLock(mp)
    }
}

impl Drop for MLock {
    #[inline]
    fn drop(&mut self) {
        releasem(self.0);
    }
}
