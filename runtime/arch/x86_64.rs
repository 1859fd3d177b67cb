//! x86_64 frame layout; the assembly is asm/x86_64.S.

use super::EntryFn;

core::arch::global_asm!(include_str!("../../asm/x86_64.S"));

/// The frame goro_switch/goro_mcall push and goro_restore pops; see the
/// diagram in asm/x86_64.S. Offsets are asserted below.
#[repr(C)]
pub(crate) struct SwitchFrame {
    mxcsr: u32,
    x87_cw: u16,
    _pad: u16,
    r15: usize,
    r14: usize,
    r13: usize,
    r12: usize,
    rbx: usize,
    rbp: usize,
    ret: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(SwitchFrame, mxcsr) == 0);
    assert!(core::mem::offset_of!(SwitchFrame, x87_cw) == 4);
    assert!(core::mem::offset_of!(SwitchFrame, r15) == 8);
    assert!(core::mem::offset_of!(SwitchFrame, r12) == 32);
    assert!(core::mem::offset_of!(SwitchFrame, rbx) == 40);
    assert!(core::mem::offset_of!(SwitchFrame, rbp) == 48);
    assert!(core::mem::offset_of!(SwitchFrame, ret) == 56);
    // 64 bytes: sp + 64 is 16-byte aligned after the `ret`, as the
    // trampoline's `call` requires.
    assert!(core::mem::size_of::<SwitchFrame>() == 64);
};

impl SwitchFrame {
    /// First frame of a goroutine: goro_gostart runs `entry(arg)` with
    /// rbx = arg, r12 = entry, and the default MXCSR / x87 control word.
    pub(crate) fn new(entry: EntryFn, arg: *mut u8, gostart: usize) -> Self {
        SwitchFrame {
            mxcsr: 0x1F80,  // all exceptions masked, round to nearest
            x87_cw: 0x037F, // extended precision, exceptions masked
            _pad: 0,
            r15: 0,
            r14: 0,
            r13: 0,
            r12: entry as usize,
            rbx: arg as usize,
            rbp: 0, // ends the frame-pointer chain
            ret: gostart,
        }
    }
}

/// The thread's live FP control state in the layout goro_restore compares:
/// MXCSR in bits 0..32, the x87 control word in bits 32..48.
pub(crate) fn fp_state() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: stores 4 + 2 bytes into our 8-byte buffer; no other effect.
    unsafe {
        core::arch::asm!(
            "stmxcsr [{0}]",
            "fnstcw [{0} + 4]",
            in(reg) buf.as_mut_ptr(),
            options(nostack, preserves_flags),
        );
    }
    u64::from_le_bytes(buf) & 0xFFFF_FFFF_FFFF
}
