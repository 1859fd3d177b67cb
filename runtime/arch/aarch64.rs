//! aarch64 frame layout; the assembly is asm/aarch64.S.

use super::EntryFn;

// The M field offsets the TLS readers at the end of the file use.
core::arch::global_asm!(
    include_str!("../../asm/aarch64.S"),
    m_locks = const core::mem::offset_of!(crate::m::M, locks),
    m_curg = const core::mem::offset_of!(crate::m::M, curg),
);

/// The frame goro_switch/goro_mcall push and goro_restore pops; see the
/// diagram in asm/aarch64.S. Only x19, x29 and lr are saved here: the
/// `asm!` call sites below declare x20-x28 and v8-v15 clobbered, so the
/// compiler saves them where they are live.
#[repr(C)]
pub(crate) struct SwitchFrame {
    x19: usize,
    /// Loaded into x20 by goro_restore (clobbered at every call site):
    /// garbage in a suspended context, the entry function in a fresh one.
    scratch: usize,
    x29: usize,
    x30: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(SwitchFrame, x19) == 0);
    assert!(core::mem::offset_of!(SwitchFrame, scratch) == 8);
    assert!(core::mem::offset_of!(SwitchFrame, x29) == 16);
    assert!(core::mem::offset_of!(SwitchFrame, x30) == 24);
    assert!(core::mem::size_of::<SwitchFrame>() == 32);
};

impl SwitchFrame {
    /// First frame of a goroutine: goro_gostart runs `entry(arg)` with
    /// x19 = arg, x20 = entry (the scratch word).
    pub(crate) fn new(entry: EntryFn, arg: *mut u8, gostart: usize) -> Self {
        SwitchFrame {
            x19: arg as usize,
            scratch: entry as usize,
            x29: 0,
            x30: gostart,
        }
    }
}

/// Calls `$routine` (goro_switch or goro_mcall, which save only the
/// registers inline asm cannot name) with the given register inputs,
/// declaring every other register clobbered: x20-x28, v8-v15 and the
/// caller-saved set. Expands to an `asm!` call: use inside `unsafe`.
macro_rules! call_saving_frame {
    ($routine:path, $($input:tt)*) => {
        core::arch::asm!(
            "bl {r}",
            r = sym $routine,
            $($input)*,
            lateout("x20") _, lateout("x21") _, lateout("x22") _, lateout("x23") _,
            lateout("x24") _, lateout("x25") _, lateout("x26") _, lateout("x27") _,
            lateout("x28") _,
            lateout("v8") _, lateout("v9") _, lateout("v10") _, lateout("v11") _,
            lateout("v12") _, lateout("v13") _, lateout("v14") _, lateout("v15") _,
            clobber_abi("C"),
        )
    };
}

/// Saves the current context into `*save_sp` and resumes the one at
/// `new_sp` (asm/aarch64.S `goro_switch`), declaring clobbered what the
/// routine does not save.
///
/// # Safety
/// As for `arch::switch`.
#[inline(always)]
pub(crate) unsafe fn switch_raw(save_sp: *mut usize, new_sp: usize) {
    // SAFETY: the caller guarantees a resumable target; goro_switch
    // preserves x19, x29 and sp and returns when something resumes
    // `save_sp`; every other register it may change is declared here.
    unsafe { call_saving_frame!(super::goro_switch, in("x0") save_sp, in("x1") new_sp) }
}

/// Go's mcall (asm/aarch64.S `goro_mcall`), declaring clobbered what the
/// routine does not save.
///
/// # Safety
/// As for `arch::mcall`.
#[inline(always)]
pub(crate) unsafe fn mcall_raw(save_sp: *mut usize, g0_sp: usize, f: super::McallFn, arg: *mut u8) {
    // SAFETY: as for switch_raw; f runs on g0 and never returns, and the
    // goroutine resumes here through gogo with x19, x29 and sp restored.
    unsafe {
        call_saving_frame!(
            super::goro_mcall,
            in("x0") save_sp,
            in("x1") g0_sp,
            in("x2") f,
            in("x3") arg
        )
    }
}

// ---------------------------------------------------------------------------
// Signal contexts, for asynchronous preemption (preempt.rs). Only the
// differences from x86_64.rs are described.
//
// The kernel's arm64 frame (arch/arm64/kernel/signal.c) starts with the
// siginfo at the handler's sp, then the ucontext, whose uc_mcontext ends in
// `__reserved`: a list of records (fpsimd_context with q0-q31, fpsr and
// fpcr; esr; sve; and extra_context, the only one holding an absolute
// pointer) — then a frame record (fp, lr) up to the altstack top.
// rt_sigreturn takes the frame at sp (16-byte aligned). aarch64 has no
// free register to jump through after restoring x0-x30, which is why
// goro resumes a preempted context through rt_sigreturn on both arches.

/// No red zone on AAPCS64 Linux.
pub(crate) const RED_ZONE: usize = 0;

/// The frame is 16-byte aligned.
pub(crate) const FRAME_ALIGN: usize = 16;

/// # Safety
/// `ctx` is the ucontext a signal handler received.
pub(crate) unsafe fn uc_pc_sp(ctx: *mut libc::c_void) -> (usize, usize) {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    (uc.uc_mcontext.pc as usize, uc.uc_mcontext.sp as usize)
}

/// Start of the kernel's signal frame: the siginfo (rt_sigreturn's sp).
pub(crate) fn sigframe_start(info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) -> usize {
    info as usize
}

/// Jump to `pc` on `sp` with `arg` in x0 and `f` in x1.
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
    uc.uc_mcontext.regs[1] = f as u64;
    uc.uc_mcontext.pc = pc as u64;
    uc.uc_mcontext.sp = sp as u64;
    uc.uc_mcontext.regs[0] = arg as u64;
    uc.uc_mcontext.regs[29] = 0; // ends the frame-pointer chain
    uc.uc_mcontext.regs[30] = 0;
}

/// Offset of `__reserved` (the record list) in the kernel's ucontext.
fn reserved_offset() -> usize {
    let o = core::mem::offset_of!(libc::ucontext_t, uc_mcontext)
        + core::mem::offset_of!(libc::mcontext_t, pstate)
        + 8;
    (o + 15) & !15
}

const EXTRA_MAGIC: u32 = 0x4558_5401;

/// # Safety
/// `frame` is a complete copy of a frame that started `delta` bytes away.
pub(crate) unsafe fn sigframe_relocate(frame: usize, delta: isize) {
    let uc = frame + core::mem::size_of::<libc::siginfo_t>();
    let mut rec = uc + reserved_offset();
    let end = rec + 4096;
    // Walk the records; only extra_context holds an absolute pointer.
    while rec + 8 <= end {
        // SAFETY: within the copied record area.
        let (magic, size) = unsafe {
            (
                core::ptr::read(rec as *const u32),
                core::ptr::read((rec + 4) as *const u32) as usize,
            )
        };
        if magic == 0 || size < 8 {
            break;
        }
        if magic == EXTRA_MAGIC {
            // struct extra_context { head; u64 datap; u32 size; ... }
            let datap = (rec + 8) as *mut u64;
            // SAFETY: as above.
            unsafe { *datap = (*datap as i64 + delta as i64) as u64 };
        }
        rec += size;
    }
}

/// # Safety
/// `frame` is a signal frame copy.
#[inline(always)] // into async_preempt, in its link section
pub(crate) unsafe fn sigframe_set_altstack(frame: usize, sp: usize, size: usize) {
    let uc = frame + core::mem::size_of::<libc::siginfo_t>();
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &mut *(uc as *mut libc::ucontext_t) };
    uc.uc_stack.ss_sp = sp as *mut _;
    uc.uc_stack.ss_size = size;
    uc.uc_stack.ss_flags = 0;
}

/// Whether the interrupted thread was blocked in a system call: pc at the
/// `svc #0` (restart) or just after it with x0 = -EINTR.
///
/// # Safety
/// `ctx` is the ucontext a signal handler received for user code.
pub(crate) unsafe fn uc_in_syscall(ctx: *mut libc::c_void) -> bool {
    const SVC0: u32 = 0xd400_0001;
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let pc = uc.uc_mcontext.pc as usize;
    // SAFETY: pc is in mapped, readable code; pc - 4 only within its page.
    unsafe {
        if core::ptr::read(pc as *const u32) == SVC0 {
            return true;
        }
        pc & 0xfff >= 4
            && core::ptr::read((pc - 4) as *const u32) == SVC0
            && uc.uc_mcontext.regs[0] as i64 == -(libc::EINTR as i64)
    }
}
