//! Goroutine dump (Go's traceback of all goroutines, `GOTRACEBACK=all`
//! on SIGQUIT) and the formatting shared with the deadlock report.
//!
//! Each live goroutine prints a Go-style header,
//! `goroutine 7 [chan receive, 3 minutes]:` (minutes only past one minute,
//! as Go), an optional `\tname: "..."` line, then frames:
//! - the calling goroutine (or thread): a full unwind of the current
//!   thread by the `backtrace` crate (DWARF CFI; the asm has CFI);
//! - a parked goroutine: its resume pc, read from the `SwitchFrame` its
//!   last switch pushed at `sched.sp` (the return address into gopark's
//!   mcall), then the frame-pointer chain saved in that frame (rbp / x29),
//!   each link checked to lie inside the goroutine's stack and to grow
//!   upwards. Release builds usually omit frame pointers, so the chain is
//!   often empty or short: the resume pc (with its inlined callers, which
//!   the line tables name: `Receiver::recv`, `Mutex::lock`, ...) is always
//!   printed. Memory of another goroutine's stack is read with
//!   `process_vm_readv` on our own pid, which fails cleanly if the stack
//!   was unmapped meanwhile; where that call is unavailable (qemu-user)
//!   only the header is printed for parked goroutines.
//! - running, runnable or in-syscall goroutines of other threads: header only.

use crate::g::{GStatus, G};
use crate::waitreason::WaitReason;
use core::sync::atomic::Ordering;
use std::io::{self, Write};

/// Byte offsets of the saved frame pointer and return address in the
/// arch's `SwitchFrame` (asserted with `offset_of!` in runtime/arch/*.rs:
/// rbp 16, ret 24 on x86_64; x29 16, x30 24 on aarch64).
const FRAME_FP_RET: (usize, usize) = (16, 24);

/// Most frames printed per goroutine.
const MAX_FRAMES: usize = 64;

/// Writes every live goroutine (id, name, status or wait reason, wait
/// time, and a backtrace where feasible; see the module docs) to `w`, in
/// Go's `GOTRACEBACK=all` format. Go's `runtime.Stack(buf, true)` /
/// the SIGQUIT dump.
///
/// Blocking: briefly takes the runtime's list of goroutines (allocation of
/// new goroutines waits); never stops other goroutines, so the picture is
/// a racy snapshot: statuses are read one goroutine at a time. Errors: those
/// of `w`. Before the runtime started it writes nothing.
pub fn dump(w: &mut impl Write) -> io::Result<()> {
    let mut buf = Vec::new();
    {
        // A runtime critical section: the goroutine list's lock and the
        // symbolizer's locks must not be held by a goroutine preempted
        // (and pinned) on this M while another on the M takes them.
        let _ml = crate::m::MLock::new();
        write_goroutines(&mut buf, true)?;
    }
    w.write_all(&buf)
}

/// Formats all live goroutines into `out`. `walk`: print frames (off for
/// the deadlock report, which runs on g0 under sched.lock and keeps to
/// headers plus resume pcs).
pub(crate) fn write_goroutines(out: &mut Vec<u8>, walk: bool) -> io::Result<()> {
    let me = crate::m::getg();
    let all: Vec<usize> = crate::g::ALLGS.lock().clone();
    let now = crate::os::nanotime();
    for gp in all {
        let gp = gp as *mut G;
        // SAFETY: Gs are never freed; the fields read here are atomics or
        // set before the G is published (goid, name), read racily for
        // diagnostics.
        let g = unsafe { &*gp };
        let st = g.status();
        if matches!(st, GStatus::Dead | GStatus::Idle) {
            continue;
        }
        let id = g.goid.get();
        let what = match st {
            GStatus::Running if gp == me => "running",
            GStatus::Running => "running",
            GStatus::Runnable => "runnable",
            GStatus::Syscall => "syscall",
            GStatus::Preempted => "preempted",
            GStatus::Waiting => match g.wait_reason() {
                WaitReason::Zero => "waiting",
                r => r.as_str(),
            },
            GStatus::Dead | GStatus::Idle => unreachable!(),
        };
        let waited = match st {
            // Bit 0 is the stack shrinker's mark (shrink::HANDLED).
            GStatus::Waiting => match g.waitsince.load(Ordering::Relaxed) & !crate::shrink::HANDLED
            {
                0 => None,
                since => Some(now - since),
            },
            _ => None,
        };
        header(out, id, what, waited)?;
        // Cloned under NAMES: the G may be exiting on another M right now,
        // freeing its name (then None is seen).
        let name = {
            let _names = crate::g::NAMES.lock();
            // SAFETY: every write of the field is made under NAMES.
            unsafe { (*g.name.get()).clone() }
        };
        if let Some(name) = name {
            writeln!(out, "\tname: {name:?}")?;
        }
        if gp == me && walk {
            trace_current(out)?;
        } else if st == GStatus::Waiting {
            trace_parked(out, g, walk)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Go's header line (traceback.go goroutineheader): `goroutine 7
/// [chan receive, 3 minutes]:`; the wait time (ns) is shown in whole
/// minutes, and only from one minute on, as Go does.
fn header(out: &mut Vec<u8>, id: u64, what: &str, waited_ns: Option<i64>) -> io::Result<()> {
    write!(out, "goroutine {id} [{what}")?;
    if let Some(w) = waited_ns {
        let mins = w / 60_000_000_000;
        if mins >= 1 {
            write!(out, ", {mins} minutes")?;
        }
    }
    writeln!(out, "]:")
}

/// Backtrace of the calling thread (the goroutine calling `dump`).
fn trace_current(out: &mut Vec<u8>) -> io::Result<()> {
    let mut pcs = Vec::new();
    backtrace::trace(|f| {
        pcs.push(f.ip() as usize);
        pcs.len() < MAX_FRAMES
    });
    for pc in pcs {
        write_frame(out, pc)?;
    }
    Ok(())
}

/// Resume pc of a parked goroutine, then its frame-pointer chain.
fn trace_parked(out: &mut Vec<u8>, g: &G, walk: bool) -> io::Result<()> {
    // SAFETY: a racy read of the saved sp (a word; the G is parked, so it
    // was written before the status became Waiting).
    let sp = unsafe { (*g.gobuf()).sp };
    // SAFETY: the stack descriptor is Copy, owned by the G's owner; a racy
    // copy of two words, only used as bounds for checked reads.
    let stack = unsafe { *g.stack.as_ptr() };
    let Some(stack) = stack else { return Ok(()) };
    if sp < stack.lo || sp >= stack.hi {
        return Ok(());
    }
    let (fp_off, ret_off) = FRAME_FP_RET;
    let (Some(mut fp), Some(pc)) = (read_word(sp + fp_off), read_word(sp + ret_off)) else {
        return Ok(());
    };
    write_frame(out, pc)?;
    if !walk {
        return Ok(());
    }
    let fp0 = fp;
    let mut n = 1;
    let mut last = sp;
    while n < MAX_FRAMES && fp > last && fp >= stack.lo && fp + 16 <= stack.hi && fp % 8 == 0 {
        let (Some(next), Some(ret)) = (read_word(fp), read_word(fp + 8)) else {
            break;
        };
        if ret == 0 {
            break;
        }
        write_frame(out, ret)?;
        last = fp;
        fp = next;
        n += 1;
    }
    let _ = fp0;
    if n == 1 {
        scan_stack(out, sp + ret_off + 8, stack.hi)?;
    }
    Ok(())
}

/// No frame-pointer chain (the usual release build): scan the words of the
/// parked goroutine's live stack above its SwitchFrame for values that
/// resolve to a source line (return addresses of its callers, but also any
/// stale code pointer left in a live frame). Labelled as heuristic.
fn scan_stack(out: &mut Vec<u8>, from: usize, hi: usize) -> io::Result<()> {
    writeln!(
        out,
        "\t... stack scan (heuristic: code addresses found on the stack)"
    )?;
    let end = hi.min(from + (64 << 10));
    let mut shown = 1;
    let mut prev = 0;
    let mut a = from;
    while a + 8 <= end && shown < MAX_FRAMES {
        let Some(w) = read_word(a) else { break };
        a += core::mem::size_of::<usize>();
        if w < 4096 || w == prev || !has_line(w) {
            continue;
        }
        prev = w;
        write_frame_outer(out, w)?;
        shown += 1;
    }
    Ok(())
}

/// The (inlined) functions at `pc` except the standard library's
/// (`/rustc/...` paths): keeps the heuristic scan short while showing the
/// user and goro frames that inlining folded into one address.
fn write_frame_outer(out: &mut Vec<u8>, pc: usize) -> io::Result<()> {
    let mut lines = Vec::new();
    backtrace::resolve((pc - 1) as *mut core::ffi::c_void, |sym| {
        if let (Some(n), Some(f), Some(l)) = (sym.name(), sym.filename(), sym.lineno()) {
            if !f.starts_with("/rustc/") {
                lines.push(format!("{n:#}(...)\n\t{}:{l} pc={pc:#x}\n", f.display()));
            }
        }
    });
    for l in lines {
        out.extend_from_slice(l.as_bytes());
    }
    Ok(())
}

/// Whether `pc` (a return address) resolves to a function with a line.
fn has_line(pc: usize) -> bool {
    let mut yes = false;
    backtrace::resolve((pc - 1) as *mut core::ffi::c_void, |sym| {
        yes |= sym.lineno().is_some() && sym.name().is_some();
    });
    yes
}

/// One word of this process's memory, or None if it is not mapped now
/// (process_vm_readv on our own pid fails with EFAULT instead of faulting).
fn read_word(addr: usize) -> Option<usize> {
    let mut v: usize = 0;
    let local = libc::iovec {
        iov_base: (&mut v as *mut usize).cast(),
        iov_len: core::mem::size_of::<usize>(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: core::mem::size_of::<usize>(),
    };
    // SAFETY: `local` describes our own writable word; the kernel validates
    // `remote` and reports unmapped memory as an error.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == core::mem::size_of::<usize>() as isize).then_some(v)
}

/// `symbol\n\tfile:line` for each (inlined) function at `pc`, Go's layout.
fn write_frame(out: &mut Vec<u8>, pc: usize) -> io::Result<()> {
    let mut any = false;
    // A return address points after the call: look up the call itself.
    backtrace::resolve((pc.saturating_sub(1)) as *mut core::ffi::c_void, |sym| {
        any = true;
        let name = sym
            .name()
            .map(|n| format!("{n:#}"))
            .unwrap_or_else(|| "???".into());
        // Writes to a Vec cannot fail.
        let _ = writeln!(out, "{name}(...)");
        let _ = match (sym.filename(), sym.lineno()) {
            (Some(f), Some(l)) => writeln!(out, "\t{}:{l} pc={pc:#x}", f.display()),
            _ => writeln!(out, "\tpc={pc:#x}"),
        };
    });
    if !any {
        writeln!(out, "???(...)\n\tpc={pc:#x}")?;
    }
    Ok(())
}

/// Writes all of `buf` to fd 2 with write(2) (no std lock: a parked
/// goroutine may hold std's stderr lock).
pub(crate) fn write_stderr(mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: buf is a valid readable slice.
        let n = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            if n < 0 && crate::os::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

// ---------------------------------------------------------------------------
// SIGQUIT: the handler writes one byte to a pipe (async-signal-safe: no
// lock, no allocation); the `goro-dump` thread reads it, prints the dump to
// stderr and exits with status 2, like Go's sighandler for SIGQUIT with
// GOTRACEBACK=all.

/// Write end of the self-pipe, -1 until installed. Relaxed: stored before
/// the handler is installed (sigaction orders it), read by the handler.
static PIPE_W: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);

/// Set by the SIGQUIT handler: the process is about to print the dump and
/// exit, so the deadlock check must not race it with its own report.
/// Relaxed: a lone flag read by checkdead.
pub(crate) static QUIT_PENDING: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// Installs the SIGQUIT handler and starts the dump thread if the config
/// asks for it. Called at runtime start, under the start lock; errors
/// (the self-pipe or the thread cannot be created: fds or threads
/// exhausted) leave nothing behind, so the start can be retried. Before
/// h40 they were ignored: `start` returned Ok and SIGQUIT then killed the
/// process with its default action, without the dump the config asked for.
pub(crate) fn init(cfg: &crate::Config) -> std::io::Result<()> {
    // Relaxed: starts are serialised by the start lock; a start that set
    // it up before (then failed at a later step) keeps it.
    if !cfg.dump_on_sigquit || PIPE_W.load(Ordering::Relaxed) >= 0 {
        return Ok(());
    }
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = crate::os::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("cannot create the SIGQUIT dump pipe: {e}"),
        ));
    }
    extern "C" fn dump_thread(arg: *mut libc::c_void) -> *mut libc::c_void {
        let fd = arg as usize as i32;
        let mut b = 0u8;
        loop {
            // SAFETY: reads one byte into b.
            let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
            if n == 1 {
                break;
            }
            if n == 0 {
                return core::ptr::null_mut();
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(b"SIGQUIT: quit\n\n");
        let _ = write_goroutines(&mut out, true);
        write_stderr(&out);
        // GORO_TRACE's file (or a trace::start's) is written at exit();
        // _exit skips that, so write it here.
        crate::trace::stop_at_fatal();
        // Go's exit status for SIGQUIT, or SIGABRT under GOTRACEBACK=crash.
        crate::throw::fatal_exit()
    }
    if let Err(e) = crate::os::newosproc(
        "goro-dump",
        256 << 10,
        dump_thread,
        fds[0] as usize as *mut libc::c_void,
    ) {
        // SAFETY: both ends are ours and nothing else has seen them.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return Err(std::io::Error::new(
            e.kind(),
            format!("cannot create the SIGQUIT dump thread: {e}"),
        ));
    }
    PIPE_W.store(fds[1], Ordering::Relaxed);
    extern "C" fn on_sigquit(_: libc::c_int) {
        QUIT_PENDING.store(true, Ordering::Relaxed);
        crate::os::write_byte_keeping_errno(PIPE_W.load(Ordering::Relaxed));
    }
    // SAFETY: a zeroed sigaction with a valid handler and an empty mask is
    // a valid argument; the handler is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_sigquit as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGQUIT, &sa, core::ptr::null_mut());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::header;

    fn h(id: u64, what: &str, w: Option<i64>) -> String {
        let mut v = Vec::new();
        header(&mut v, id, what, w).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn header_matches_go() {
        assert_eq!(h(1, "running", None), "goroutine 1 [running]:\n");
        assert_eq!(
            h(7, "chan receive", Some(59_999_999_999)),
            "goroutine 7 [chan receive]:\n"
        );
        assert_eq!(
            h(7, "chan receive", Some(3 * 60_000_000_000 + 5)),
            "goroutine 7 [chan receive, 3 minutes]:\n"
        );
        assert_eq!(
            h(9, "sync.Mutex.Lock", Some(60_000_000_000)),
            "goroutine 9 [sync.Mutex.Lock, 1 minutes]:\n"
        );
    }
}
