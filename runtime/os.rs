//! Thin OS layer: futex, clocks, thread ids, CPU count, page size.
//!
//! Go's os_linux.go and lock_futex.go counterparts. Everything here is a
//! direct system call wrapper; nothing allocates, so the futex helpers are
//! usable from any context.

use core::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*addr == val`, at most `timeout` (None = forever). May wake
/// spuriously; callers re-check their condition. Go's futexsleep.
pub(crate) fn futex_wait(addr: &AtomicU32, val: u32, timeout: Option<Duration>) {
    let ts;
    let tsp = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    // SAFETY: addr is a valid, aligned u32 for the duration of the call; a
    // private futex wait only reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            val,
            tsp,
        );
    }
}

/// Wakes up to `n` threads sleeping on `addr`. Go's futexwakeup.
/// Takes a raw pointer: the word may already be gone (a waker racing with
/// the waiter's return); the kernel only uses the address as a key.
pub(crate) fn futex_wake(addr: *const AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key, never dereferences it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

/// Monotonic time in ns since an arbitrary origin. Go's nanotime.
#[inline]
pub(crate) fn nanotime() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CPU time (ns) the thread `tid` of this process has used, or None if the
/// kernel does not say (the thread is gone). One system call: the
/// per-thread CPU clock that glibc's pthread_getcpuclockid builds
/// (CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED on the negated id).
pub(crate) fn thread_cputime(tid: i32) -> Option<i64> {
    let clock = ((!tid) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; an invalid clock id is an error.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec)
}

/// The calling thread's kernel id. Go's gettid.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The CPU the calling thread runs on (it may have moved by the time the
/// caller looks), or -1 if the kernel cannot say. glibc reads it from the
/// thread's rseq area when registered (2.4 ns here), else from the vDSO
/// (x86_64) or with a system call.
#[inline]
pub(crate) fn getcpu() -> i32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    unsafe { libc::sched_getcpu() }
}

/// Sleeps the OS thread for `us` microseconds. Go's usleep.
pub(crate) fn usleep(us: u64) {
    std::thread::sleep(Duration::from_micros(us));
}

/// Sets the calling thread's timer slack (ns): how much later than asked
/// the kernel may end its sleeps, to batch wake-ups (50 µs by default).
/// Errors are ignored: the slack only tunes precision.
pub(crate) fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no
    // memory of ours.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// Yields the OS thread. Go's osyield.
pub(crate) fn osyield() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// CPUs available to this process: sched_getaffinity and the cgroup CPU
/// quota, both honoured by std. Go's getproccount (which reads only the
/// affinity mask).
pub(crate) fn ncpu() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Go's procyield: `n` PAUSE (x86_64) / YIELD (aarch64) hints, for spin
/// waits that expect the other CPU to finish within nanoseconds.
#[inline]
pub(crate) fn procyield(n: u32) {
    for _ in 0..n {
        core::hint::spin_loop();
    }
}

/// [`ncpu`] computed once (std's query reads cgroup files; spin decisions
/// must be cheap).
pub(crate) fn ncpu_cached() -> usize {
    use core::sync::atomic::{AtomicUsize, Ordering};
    // Relaxed: every thread computes the same value.
    static NCPU: AtomicUsize = AtomicUsize::new(0);
    let n = NCPU.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    let n = ncpu().max(1);
    NCPU.store(n, Ordering::Relaxed);
    n
}

/// The system page size in bytes.
pub(crate) fn page_size() -> usize {
    // Relaxed: the value is the same whoever computes it.
    static PAGE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
    let p = PAGE.load(core::sync::atomic::Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    PAGE.store(p, core::sync::atomic::Ordering::Relaxed);
    p
}

/// Thread creations still to fail with EAGAIN, after FAIL_THREADS_AFTER
/// more succeed (test hook `__private::fail_thread_creations`).
pub(crate) static FAIL_THREADS: core::sync::atomic::AtomicI64 =
    core::sync::atomic::AtomicI64::new(0);
pub(crate) static FAIL_THREADS_AFTER: core::sync::atomic::AtomicI64 =
    core::sync::atomic::AtomicI64::new(0);

/// Go's newosproc: starts a detached OS thread running `f(arg)` with a
/// native stack of `stack_size` bytes, named `name` (≤ 15 bytes shown).
///
/// Runtime threads are created with pthread_create rather than
/// std::thread so they inherit nothing from the creating thread (std's
/// test-harness output capture in particular: goroutine output must not land
/// in whichever test happened to start the runtime). `f` must not unwind.
pub(crate) fn newosproc(
    name: &str,
    stack_size: usize,
    f: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> std::io::Result<()> {
    // Test knob: fail as pthread_create does at RLIMIT_NPROC (root, which
    // tests run as, ignores that limit). Relaxed: a counter only tests set.
    if FAIL_THREADS.load(core::sync::atomic::Ordering::Relaxed) > 0
        && FAIL_THREADS_AFTER.fetch_sub(1, core::sync::atomic::Ordering::Relaxed) <= 0
        && FAIL_THREADS.fetch_sub(1, core::sync::atomic::Ordering::Relaxed) > 0
    {
        return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
    }
    // SAFETY: attr is initialised by pthread_attr_init before use and
    // destroyed after; the thread is detached so nothing joins it.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        let r = libc::pthread_attr_init(&mut attr);
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        let min = libc::PTHREAD_STACK_MIN.max(16 << 10);
        libc::pthread_attr_setstacksize(&mut attr, stack_size.max(min));
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut tid: libc::pthread_t = 0;
        let r = libc::pthread_create(&mut tid, &attr, f, arg);
        libc::pthread_attr_destroy(&mut attr);
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        crate::deadlock::thread_started();
        let mut cname = [0u8; 16];
        for (d, s) in cname.iter_mut().zip(name.bytes().take(15)) {
            *d = s;
        }
        libc::pthread_setname_np(tid, cname.as_ptr().cast());
    }
    Ok(())
}

/// This thread's errno slot. LLVM treats `__errno_location` as a pure
/// function and merges calls to it across anything, goro's switches
/// included: in an accept loop that parks between two failing `accept4`s
/// it kept the first result in a stack slot and read the second errno
/// from the thread the goroutine had left (session 22). The call goes
/// through a `black_box`ed pointer so that each read computes the slot
/// on the thread it runs on.
#[inline(always)]
pub(crate) fn errno_location() -> *mut libc::c_int {
    let f: unsafe extern "C" fn() -> *mut libc::c_int =
        core::hint::black_box(libc::__errno_location);
    // SAFETY: __errno_location has no preconditions.
    unsafe { f() }
}

/// This thread's errno, read afresh (see [`errno_location`]).
#[inline(always)]
pub(crate) fn errno() -> i32 {
    // SAFETY: the slot is valid for this thread's lifetime.
    unsafe { *errno_location() }
}

/// `io::Error::last_os_error()` without the merged errno read (see
/// [`errno_location`]): goro's code uses this one.
#[inline(always)]
pub(crate) fn last_os_error() -> std::io::Error {
    std::io::Error::from_raw_os_error(errno())
}

/// Writes one byte to `fd`, ignoring the result, with errno preserved:
/// the self-pipe wake-up of a signal handler (async-signal-safe; the
/// interrupted code must not see the handler's errno).
pub(crate) fn write_byte_keeping_errno(fd: libc::c_int) {
    let b = 1u8;
    let e = errno();
    // SAFETY: write(2) of one byte from a live local; a bad fd only fails.
    unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    // SAFETY: this thread's errno slot.
    unsafe { *errno_location() = e };
}
