//! Signals: the guard-page fault handler that turns a stack overflow into
//! a named report, the SIGURG handler of asynchronous preemption and
//! blocking detection (the decisions live in preempt.rs), and each M's
//! alternate signal stack (Go's gsignal).
//!
//! SIGURG is Go's choice (sigPreempt, signal_unix.go): it is sent by
//! nothing else in practice, its default action is to ignore it, and
//! debuggers pass it through. A SIGURG that is not ours — sent with kill or
//! sigqueue, or by tgkill when no request is pending — goes to the handler
//! installed before goro's, if any. goro's handler uses SA_RESTART, so
//! restartable system calls (read, write, nanosleep, futex, accept without
//! a timeout...) resume without EINTR; calls that Linux never restarts
//! (epoll_wait, poll, select, and socket calls with a timeout) can return
//! EINTR, as under Go.
//!
//! A goroutine that runs off its stack touches the guard page below it; the
//! kernel delivers SIGSEGV on the M's alternate stack (the goroutine's own
//! stack is exhausted). The handler maps the fault address back to a stack
//! through the arena table (stack::guard_hit), or, for an arena the table
//! has no room for, checks the running goroutine's own guard page, prints
//! `goroutine <id> has overflowed its stack (reserved <N> KiB)` and aborts.
//! Any other fault is passed to the handler that was installed before ours
//! (std's, which reports main-thread overflows), or to the default action.
//!
//! Everything on the handler path is async-signal-safe: atomics, write(2),
//! abort. No locks, no allocation.

use crate::m::M;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Alternate signal stack per M (bytes).
const SIGSTACK_SIZE: usize = 64 << 10;

static OLD_SEGV: AtomicUsize = AtomicUsize::new(0);
static OLD_BUS: AtomicUsize = AtomicUsize::new(0);
static OLD_URG: AtomicUsize = AtomicUsize::new(0);

/// Installs the fault handlers once (runtime start), and the SIGURG
/// handler when `preempt` (async preemption or blocking detection) is on.
pub(crate) fn init(preempt: bool) {
    let mut sigs = vec![
        (
            libc::SIGSEGV,
            &OLD_SEGV,
            fault_handler as *const () as usize,
            0,
        ),
        (
            libc::SIGBUS,
            &OLD_BUS,
            fault_handler as *const () as usize,
            0,
        ),
    ];
    if preempt {
        sigs.push((
            libc::SIGURG,
            &OLD_URG,
            sigurg_handler as *const () as usize,
            libc::SA_RESTART,
        ));
    }
    for (sig, old, handler, extra) in sigs {
        // Installed by an earlier start that failed later on: keep the
        // handler recorded then. Recording our own handler as the one to
        // chain to would make a foreign signal call it for ever.
        // Relaxed: starts are serialised by the start lock.
        if old.load(Ordering::Relaxed) != 0 {
            continue;
        }
        // SAFETY: zeroed sigaction is a valid "no handler" value; we fill it.
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | extra;
        // SAFETY: valid pointer to a sigset in sa.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        let oldp = Box::into_raw(Box::new(
            // SAFETY: as above.
            unsafe { core::mem::zeroed::<libc::sigaction>() },
        ));
        // SAFETY: sa and oldp are valid; replacing a fault handler is
        // allowed at any time.
        if unsafe { libc::sigaction(sig, &sa, oldp) } == 0 {
            // Release: the handler Acquires it before chaining.
            old.store(oldp as usize, Ordering::Release);
        }
    }
}

/// Go's minitSignalMask: a thread starts with its creator's signal mask,
/// and a program that blocked every signal before the runtime started (a
/// daemon that `sigwait`s in one thread) would have every goro thread
/// block SIGURG (no preemption, no blocking detection: a CPU loop hung
/// its P for good, h17) and the fault signals (a stack overflow killed
/// the process without its report). Unblocks those on the calling
/// thread; the rest of the mask stays as inherited.
pub(crate) fn unblock_runtime_signals() {
    change_thread_mask(
        libc::SIG_UNBLOCK,
        [
            libc::SIGURG,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
        ],
    );
}

/// Signals 1 to 64 of `set` as bits (bit n - 1 for signal n): the
/// kernel's own sigset, which glibc's `sigset_t` begins with.
/// Async-signal-safe (a read).
pub(crate) fn sigset_bits(set: &libc::sigset_t) -> u64 {
    // SAFETY: sigset_t is at least 8 bytes of plain data on Linux (glibc:
    // 128); the first 8 are signals 1-64 in the kernel's layout.
    unsafe { core::ptr::read_unaligned((set as *const libc::sigset_t).cast::<u64>()) }
}

/// `pthread_sigmask(how, sigs)` on the calling thread (`how`: SIG_BLOCK or
/// SIG_UNBLOCK); only that thread's mask changes.
pub(crate) fn change_thread_mask(how: libc::c_int, sigs: impl IntoIterator<Item = libc::c_int>) {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it
    // and pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in sigs {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(how, &set, core::ptr::null_mut());
    }
}

/// Go's minit: give the current M an alternate signal stack, and unblock
/// the signals the runtime needs ([`unblock_runtime_signals`]). Records
/// the resulting mask as the M's `sigmask`.
pub(crate) fn minit(m: &M) {
    unblock_runtime_signals();
    // SAFETY: a zeroed sigset_t is a valid argument to fill; the query
    // (null new set) changes nothing.
    let mask = unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        sigset_bits(&set)
    };
    m.sigmask.set(mask);
    let page = crate::os::page_size();
    let len = SIGSTACK_SIZE + page;
    // SAFETY: fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        // On a new M before it runs anything: allocating here is fine.
        crate::throw::throwf(format_args!(
            "minit: cannot map the signal stack ({} KiB): {}",
            len >> 10,
            crate::os::last_os_error()
        ));
    }
    // SAFETY: the lowest page of our own mapping becomes its guard.
    unsafe { libc::mprotect(p, page, libc::PROT_NONE) };
    let ss = libc::stack_t {
        ss_sp: (p as usize + page) as *mut _,
        ss_flags: 0,
        ss_size: SIGSTACK_SIZE,
    };
    // SAFETY: ss describes memory we own for the thread's lifetime.
    if unsafe { libc::sigaltstack(&ss, core::ptr::null_mut()) } != 0 {
        crate::throw::throw("minit: sigaltstack failed");
    }
    m.gsignal.set((p as usize + page, SIGSTACK_SIZE));
}

/// The SIGURG handler: a preemption or detach request of sysmon's for
/// this M (preempt::on_signal), or someone else's signal (chained).
extern "C" fn sigurg_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let mp = crate::m::getm();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, pid) = unsafe { ((*info).si_code, (*info).si_pid()) };
    // SAFETY: getpid has no preconditions.
    if !mp.is_null() && code == libc::SI_TKILL && pid == unsafe { libc::getpid() } {
        // SAFETY: this thread's M, alive forever.
        let m = unsafe { &*mp };
        // Acquire pairs with signal_m's CAS: take the request.
        let req = m.preempt_req.swap(0, Ordering::Acquire);
        if req != 0 {
            // errno is the interrupted code's (async_preempt saves it for
            // the goroutine): keep it whatever the handler's calls do.
            let errno = crate::os::errno();
            // SAFETY: the handler's own arguments, on this M's thread.
            unsafe { crate::preempt::on_signal(m, req, info, ctx) };
            // SAFETY: this thread's errno slot.
            unsafe { *crate::os::errno_location() = errno };
            return;
        }
    }
    chain(sig, info, ctx);
}

extern "C" fn fault_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let hit = crate::stack::guard_hit(addr).or_else(|| running_guard_hit(addr));
    if let Some((lo, size)) = hit {
        report_overflow(lo, size);
    }
    chain(sig, info, ctx);
}

/// If `addr` lies in the guard page directly below the stack of the G
/// this M runs, that stack's `(lo, usable size)` in bytes. The fallback
/// for a stack whose arena the table of `stack::guard_hit` does not hold
/// (it has room for 65,536 arenas, and each unpooled stack above 64 MiB
/// is an arena of its own): before h46 an overflow there was a bare
/// SIGSEGV. Go checks a goroutine's own bounds likewise (`gp.stack` in
/// morestack's "stack overflow" check). Async-signal-safe: plain reads;
/// never blocks or panics.
fn running_guard_hit(addr: usize) -> Option<(usize, usize)> {
    let gp = crate::m::getg();
    if gp.is_null() {
        return None;
    }
    // SAFETY: the running G of this M, never freed; a plain read of its
    // stack bounds, which change only while the G is dead (newproc,
    // goexit0), not while it runs on this thread and faults.
    let s = unsafe { &*gp }.stack.get()?;
    let page = crate::os::page_size();
    (s.lo.saturating_sub(page)..s.lo)
        .contains(&addr)
        .then(|| (s.lo, s.size()))
}

/// Prints the overflow report for the stack starting at `lo` and aborts.
/// One report per process: a second thread overflowing meanwhile waits for
/// the first one's abort instead of interleaving its pieces with it.
fn report_overflow(lo: usize, size: usize) -> ! {
    static REPORTING: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    // SeqCst: a single flag; the winner alone writes.
    if REPORTING.swap(true, Ordering::SeqCst) {
        loop {
            // SAFETY: pause is async-signal-safe; the winner's abort ends
            // the process.
            unsafe { libc::pause() };
        }
    }
    let mut id_buf = [0u8; 20];
    let mut kib_buf = [0u8; 20];
    let gp = crate::m::getg();
    let mut id = "?";
    let mut name = None;
    if !gp.is_null() {
        // SAFETY: the running G of this M, never freed; plain reads.
        let g = unsafe { &*gp };
        if let Some(s) = g.stack.get() {
            if s.lo == lo {
                id = crate::throw::fmt_u64(g.goid.get(), &mut id_buf);
                // SAFETY: the G runs on this M, so its name is not being
                // replaced; a read of the Box's contents only.
                name = unsafe { (*g.name.get()).as_deref() };
            }
        }
    }
    let kib = crate::throw::fmt_u64((size >> 10) as u64, &mut kib_buf);
    crate::throw::write_stderr(&[
        "goroutine ",
        id,
        " has overflowed its stack (reserved ",
        kib,
        " KiB); raise it with goro::Builder::stack_size or goro::Config::stack_size",
    ]);
    if let Some(n) = name {
        crate::throw::write_stderr(&["\ngoroutine ", id, " is named \"", n, "\""]);
    }
    crate::throw::write_stderr(&["\nfatal error: stack overflow\n"]);
    crate::throw::abort_default()
}

/// Passes a fault we do not own to the previous handler, or re-raises it
/// with the default action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let old = match sig {
        libc::SIGSEGV => &OLD_SEGV,
        libc::SIGBUS => &OLD_BUS,
        _ => &OLD_URG,
    };
    // Acquire: pairs with init's Release store.
    let oldp = old.load(Ordering::Acquire) as *const libc::sigaction;
    if !oldp.is_null() {
        // SAFETY: oldp was filled by sigaction in init and is never freed.
        let h = unsafe { (*oldp).sa_sigaction };
        // SAFETY: as above.
        let flags = unsafe { (*oldp).sa_flags };
        if h != libc::SIG_DFL && h != libc::SIG_IGN {
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: h is a valid SA_SIGINFO handler installed before us.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, ctx);
            } else {
                // SAFETY: h is a valid plain handler installed before us.
                let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
            return;
        }
    }
    if sig == libc::SIGURG {
        // Default action for SIGURG is to ignore it; SIG_IGN likewise.
        return;
    }
    // Default action: restore it and return; the faulting instruction
    // re-executes and the kernel kills the process with the right signal.
    // SAFETY: resetting a signal disposition is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &sa, core::ptr::null_mut());
    }
}
