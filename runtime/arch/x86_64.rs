//! x86_64 frame layout; the assembly is asm/x86_64.S.

use super::EntryFn;

// The M field offsets the TLS readers at the end of the file use.
core::arch::global_asm!(
    include_str!("../../asm/x86_64.S"),
    m_locks = const core::mem::offset_of!(crate::m::M, locks),
    m_curg = const core::mem::offset_of!(crate::m::M, curg),
);

/// The frame goro_switch/goro_mcall push and goro_restore pops; see the
/// diagram in asm/x86_64.S. Offsets are asserted below. Only rbx and rbp
/// are saved here: the `asm!` call sites in arch/mod.rs declare r12-r15
/// clobbered, so the compiler saves them where they are live.
#[repr(C)]
pub(crate) struct SwitchFrame {
    /// Loaded into r12 by goro_restore (clobbered at every call site):
    /// garbage in a suspended context, the entry function in a fresh one.
    /// Keeps the saved sp 16-byte aligned.
    scratch: usize,
    rbx: usize,
    rbp: usize,
    ret: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(SwitchFrame, scratch) == 0);
    assert!(core::mem::offset_of!(SwitchFrame, rbx) == 8);
    assert!(core::mem::offset_of!(SwitchFrame, rbp) == 16);
    assert!(core::mem::offset_of!(SwitchFrame, ret) == 24);
    // 32 bytes: sp + 32 is 16-byte aligned after the `ret`, as the
    // trampoline's `call` requires.
    assert!(core::mem::size_of::<SwitchFrame>() == 32);
};

impl SwitchFrame {
    /// First frame of a goroutine: goro_gostart runs `entry(arg)` with
    /// rbx = arg, r12 = entry (the scratch word).
    pub(crate) fn new(entry: EntryFn, arg: *mut u8, gostart: usize) -> Self {
        SwitchFrame {
            scratch: entry as usize,
            rbx: arg as usize,
            rbp: 0, // ends the frame-pointer chain
            ret: gostart,
        }
    }
}

/// Calls `$routine` (goro_switch or goro_mcall, which save only the
/// registers inline asm cannot name) with the given register inputs,
/// declaring every other register clobbered: r12-r15 and the
/// caller-saved set. Expands to an `asm!` call: use inside `unsafe`.
macro_rules! call_saving_frame {
    ($routine:path, $($input:tt)*) => {
        core::arch::asm!(
            "call {r}",
            r = sym $routine,
            $($input)*,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("C"),
        )
    };
}

/// Saves the current context into `*save_sp` and resumes the one at
/// `new_sp` (asm/x86_64.S `goro_switch`), declaring clobbered what the
/// routine does not save.
///
/// # Safety
/// As for `arch::switch`.
#[inline(always)]
pub(crate) unsafe fn switch_raw(save_sp: *mut usize, new_sp: usize) {
    // SAFETY: the caller guarantees a resumable target; goro_switch
    // preserves rbx, rbp and rsp and returns when something resumes
    // `save_sp`; every other register it may change is declared here.
    unsafe { call_saving_frame!(super::goro_switch, in("rdi") save_sp, in("rsi") new_sp) }
}

/// Go's mcall (asm/x86_64.S `goro_mcall`), declaring clobbered what the
/// routine does not save.
///
/// # Safety
/// As for `arch::mcall`.
#[inline(always)]
pub(crate) unsafe fn mcall_raw(save_sp: *mut usize, g0_sp: usize, f: super::McallFn, arg: *mut u8) {
    // SAFETY: as for switch_raw; f runs on g0 and never returns, and the
    // goroutine resumes here through gogo with rbx, rbp and rsp restored.
    unsafe {
        call_saving_frame!(
            super::goro_mcall,
            in("rdi") save_sp,
            in("rsi") g0_sp,
            in("rdx") f,
            in("rcx") arg
        )
    }
}

// ---------------------------------------------------------------------------
// Signal contexts, for asynchronous preemption (preempt.rs).
//
// The kernel's x86_64 signal frame, as the SIGURG handler finds it on the
// M's alternate signal stack (arch/x86/include/asm/sigframe.h):
//
//     altstack top
//     +---------------------------+
//     | fpstate (xsave area,      |  64-byte aligned; uc_mcontext.fpregs
//     |   every XCR0 component)   |  points here (an absolute pointer)
//     | siginfo                   |
//     | ucontext (uc_mcontext =   |
//     |   GPRs, rip, rflags, ...) |  <- ctx (the handler's third argument)
//     | pretcode                  |  <- frame start = ctx - 8
//     +---------------------------+
//
// rt_sigreturn takes the frame at sp - 8 and restores every register, the
// full FP/vector state (xrstor with the saved feature mask), the signal
// mask and the alternate stack from it.

/// Bytes below the interrupted sp that the interrupted code may still use
/// (the SysV red zone): the copied frame must go below them.
pub(crate) const RED_ZONE: usize = 128;

/// Alignment the copied frame keeps modulo (the xsave area needs 64).
pub(crate) const FRAME_ALIGN: usize = 64;

/// The interrupted pc and sp.
///
/// # Safety
/// `ctx` is the ucontext a signal handler received.
pub(crate) unsafe fn uc_pc_sp(ctx: *mut libc::c_void) -> (usize, usize) {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    (
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize,
    )
}

/// Start of the kernel's signal frame (what rt_sigreturn expects at sp - 8).
pub(crate) fn sigframe_start(_info: *mut libc::siginfo_t, ctx: *mut libc::c_void) -> usize {
    ctx as usize - 8
}

/// Makes the interrupted context, on return from the handler, jump to
/// `pc` with stack pointer `sp`, `arg` in rdi and `f` in rsi (the
/// goro_async_preempt trampoline's inputs). Direction flag
/// cleared as the ABI requires at a call. Everything it overwrites was
/// saved in the frame copy.
///
/// # Safety
/// `ctx` is the ucontext a signal handler received.
pub(crate) unsafe fn uc_redirect(
    ctx: *mut libc::c_void,
    pc: usize,
    sp: usize,
    arg: usize,
    f: usize,
) {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
    let r = &mut uc.uc_mcontext.gregs;
    r[libc::REG_RSI as usize] = f as i64;
    r[libc::REG_RIP as usize] = pc as i64;
    r[libc::REG_RSP as usize] = sp as i64;
    r[libc::REG_RDI as usize] = arg as i64;
    r[libc::REG_RBP as usize] = 0; // ends the frame-pointer chain
    r[libc::REG_EFL as usize] &= !(1 << 10); // DF
}

/// Fixes the absolute pointers inside a copy of a signal frame that was
/// moved by `delta` bytes (the fpstate pointer).
///
/// # Safety
/// `frame` is a complete copy of a frame that started `delta` bytes away.
pub(crate) unsafe fn sigframe_relocate(frame: usize, delta: isize) {
    // SAFETY: guaranteed by the caller; the ucontext follows pretcode.
    let uc = unsafe { &mut *((frame + 8) as *mut libc::ucontext_t) };
    let fp = uc.uc_mcontext.fpregs;
    if !fp.is_null() {
        uc.uc_mcontext.fpregs = (fp as isize + delta) as *mut _;
    }
}

/// Sets the alternate signal stack that rt_sigreturn will install (the
/// current M's: a G preempted on one M may resume on another).
///
/// # Safety
/// `frame` is a signal frame copy.
#[inline(always)] // into async_preempt, in its link section
pub(crate) unsafe fn sigframe_set_altstack(frame: usize, sp: usize, size: usize) {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &mut *((frame + 8) as *mut libc::ucontext_t) };
    uc.uc_stack.ss_sp = sp as *mut _;
    uc.uc_stack.ss_size = size;
    uc.uc_stack.ss_flags = 0;
}

/// Whether the interrupted thread was blocked in a system call: the
/// kernel leaves rip at the `syscall` instruction to restart it
/// (SA_RESTART), or just after it with rax = -EINTR.
///
/// # Safety
/// `ctx` is the ucontext a signal handler received for user code.
pub(crate) unsafe fn uc_in_syscall(ctx: *mut libc::c_void) -> bool {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    let rax = uc.uc_mcontext.gregs[libc::REG_RAX as usize];
    // SAFETY: rip is in mapped, readable code; rip - 2 is read only when it
    // stays within rip's page.
    unsafe {
        let at = core::ptr::read_unaligned(rip as *const [u8; 2]);
        if at == [0x0f, 0x05] {
            return true;
        }
        rip & 0xfff >= 2
            && core::ptr::read_unaligned((rip - 2) as *const [u8; 2]) == [0x0f, 0x05]
            && rax == -(libc::EINTR as i64)
    }
}
