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

/// The calling thread's kernel id. Go's gettid.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Sleeps the OS thread for `us` microseconds. Go's usleep.
pub(crate) fn usleep(us: u64) {
    std::thread::sleep(Duration::from_micros(us));
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

/// The system page size in bytes.
pub(crate) fn page_size() -> usize {
    static PAGE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
    // Relaxed: the value is the same whoever computes it.
    let p = PAGE.load(core::sync::atomic::Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    PAGE.store(p, core::sync::atomic::Ordering::Relaxed);
    p
}
