//! The network poller's core: one epoll instance and an eventfd to break
//! out of a blocking wait (Go's netpoll_epoll.go).
//!
//! An M with nothing to run and timers pending blocks here until the
//! earliest timer (findRunnable, sched.rs); `netpoll_break` wakes it when an
//! earlier timer appears. Socket readiness (poll descriptors, `goro::net`)
//! plugs into the same wait: `netpoll` returns the Gs it made runnable.

use crate::g::G;
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

static EPFD: AtomicI32 = AtomicI32::new(-1);
static BREAK_FD: AtomicI32 = AtomicI32::new(-1);
/// 1 while a break is pending (Go's netpollWakeSig): avoids a write per call.
static WAKE_SIG: AtomicU32 = AtomicU32::new(0);

/// Token of the eventfd in epoll events.
const BREAK_TOKEN: u64 = u64::MAX;

/// Go's netpollinit. Called once at runtime start.
pub(crate) fn init() -> std::io::Result<()> {
    // SAFETY: plain syscalls creating new fds.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    let ev = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if ev < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut e = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: BREAK_TOKEN,
    };
    // SAFETY: ep and ev are fds we own; e is a valid event.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ev, &mut e) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Release: publishes the fds to Ms that Acquire them.
    BREAK_FD.store(ev, Ordering::Release);
    EPFD.store(ep, Ordering::Release);
    Ok(())
}

/// Go's netpollBreak: wakes an M blocked in `netpoll`. Any thread.
pub(crate) fn netpoll_break() {
    // AcqRel: only the first breaker writes; the poller's reset pairs with it.
    if WAKE_SIG
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let one: u64 = 1;
    let fd = BREAK_FD.load(Ordering::Acquire);
    // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Go's netpoll: waits up to `delay` ns (<0 forever, 0 non-blocking) and
/// pushes the Gs made runnable onto `out`. Runs without a P when blocking.
pub(crate) fn netpoll(delay: i64, _out: &mut Vec<*mut G>) {
    let ep = EPFD.load(Ordering::Acquire);
    if ep < 0 {
        return;
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let n = wait(ep, &mut events, delay);
    for e in events.iter().take(n.max(0) as usize) {
        if e.u64 == BREAK_TOKEN {
            let mut buf: u64 = 0;
            let fd = BREAK_FD.load(Ordering::Acquire);
            // SAFETY: reads 8 bytes into a valid u64 from our eventfd.
            unsafe { libc::read(fd, (&mut buf as *mut u64).cast(), 8) };
            WAKE_SIG.store(0, Ordering::Release);
        }
    }
}

/// epoll_pwait2 (ns resolution, Linux 5.11+), falling back to epoll_wait
/// (ms resolution, rounded up so a timer is never run early).
fn wait(ep: i32, events: &mut [libc::epoll_event], delay: i64) -> i32 {
    static HAVE_PWAIT2: AtomicI32 = AtomicI32::new(1);
    // Relaxed: a cached capability bit; a race only repeats the probe.
    if HAVE_PWAIT2.load(Ordering::Relaxed) == 1 {
        let ts = libc::timespec {
            tv_sec: (delay.max(0) / 1_000_000_000) as libc::time_t,
            tv_nsec: (delay.max(0) % 1_000_000_000) as libc::c_long,
        };
        let tsp = if delay < 0 {
            core::ptr::null()
        } else {
            &ts as *const libc::timespec
        };
        // SAFETY: events is a valid buffer of events.len() entries; tsp is
        // null or a valid timespec; no signal mask is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                ep,
                events.as_mut_ptr(),
                events.len() as i32,
                tsp,
                core::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        } as i32;
        if r >= 0 {
            return r;
        }
        let err = std::io::Error::last_os_error().raw_os_error();
        if err != Some(libc::ENOSYS) {
            return 0; // EINTR: the caller re-checks its state
        }
        HAVE_PWAIT2.store(0, Ordering::Relaxed);
    }
    let ms = if delay < 0 {
        -1
    } else if delay == 0 {
        0
    } else {
        ((delay + 999_999) / 1_000_000).min(i32::MAX as i64) as i32
    };
    // SAFETY: events is a valid buffer of events.len() entries.
    let r = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, ms) };
    r.max(0)
}
