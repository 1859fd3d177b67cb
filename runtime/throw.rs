//! Fatal errors. Go's throw/fatal: print `fatal error: …` and abort the
//! process. Never unwinds through scheduler or assembly frames.

use std::io::Write;

/// Prints `fatal error: <msg>` to stderr and aborts. Use for broken runtime
/// invariants and unrecoverable exhaustion; never returns.
#[cold]
#[inline(never)]
pub(crate) fn throw(msg: &str) -> ! {
    write_stderr(&["fatal error: ", msg, "\n"]);
    std::process::abort()
}

/// `Config::crash_on_fatal` (Go's GOTRACEBACK=crash). Relaxed: stored
/// at start before any M or report thread exists (thread creation orders
/// it), read once when a fatal report ends the process.
pub(crate) static CRASH_ON_FATAL: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// Ends the process after a fatal report: exit status 2 (Go's exit(2)
/// after a fatal error), or with `crash_on_fatal` SIGABRT (Go's crash()).
pub(crate) fn fatal_exit() -> ! {
    if CRASH_ON_FATAL.load(core::sync::atomic::Ordering::Relaxed) {
        abort_default();
    }
    // SAFETY: ends the process at once, without destructors or atexit
    // handlers: goroutines are stuck holding whatever they hold.
    unsafe { libc::_exit(2) }
}

/// Ends the process with SIGABRT and its default action (Go's
/// dieFromSignal(SIGABRT)): a handler the program installed does not run,
/// so the system can keep a core dump. Async-signal-safe.
pub(crate) fn abort_default() -> ! {
    // SAFETY: resets SIGABRT's disposition (a plain syscall on a valid,
    // zeroed sigaction), then aborts; abort(3) unblocks SIGABRT itself.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGABRT, &sa, core::ptr::null_mut());
        libc::abort()
    }
}

/// Writes pieces to fd 2 with plain write(2): no locks, no allocation, so it
/// is usable from signal handlers and with runtime locks held.
pub(crate) fn write_stderr(parts: &[&str]) {
    for p in parts {
        let mut b = p.as_bytes();
        while !b.is_empty() {
            // SAFETY: b is a valid readable buffer of b.len() bytes.
            let n = unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
            if n <= 0 {
                return;
            }
            b = &b[n as usize..];
        }
    }
}

/// Formats a u64 in decimal into `buf` without allocating; returns the text.
pub(crate) fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[i..]).unwrap_or("?")
}

/// `throw` with a formatted message; allocates, so not for signal handlers.
#[cold]
pub(crate) fn throwf(args: std::fmt::Arguments<'_>) -> ! {
    let mut s = Vec::new();
    let _ = s.write_fmt(args);
    throw(core::str::from_utf8(&s).unwrap_or("?"))
}
