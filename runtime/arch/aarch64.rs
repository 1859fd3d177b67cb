//! aarch64 frame layout; the assembly is asm/aarch64.S.

use super::EntryFn;

core::arch::global_asm!(include_str!("../../asm/aarch64.S"));

/// The frame goro_switch/goro_mcall push and goro_restore pops; see the
/// diagram in asm/aarch64.S.
#[repr(C)]
pub(crate) struct SwitchFrame {
    x19: usize,
    x20: usize,
    x21_x28: [usize; 8],
    x29: usize,
    x30: usize,
    d8_d15: [u64; 8],
    fpcr: usize,
    _pad: usize,
}

const _: () = {
    assert!(core::mem::offset_of!(SwitchFrame, x19) == 0);
    assert!(core::mem::offset_of!(SwitchFrame, x20) == 8);
    assert!(core::mem::offset_of!(SwitchFrame, x29) == 80);
    assert!(core::mem::offset_of!(SwitchFrame, x30) == 88);
    assert!(core::mem::offset_of!(SwitchFrame, d8_d15) == 96);
    assert!(core::mem::offset_of!(SwitchFrame, fpcr) == 160);
    assert!(core::mem::size_of::<SwitchFrame>() == 176);
};

impl SwitchFrame {
    /// First frame of a goroutine: goro_gostart runs `entry(arg)` with
    /// x19 = arg, x20 = entry, fpcr = 0 (round to nearest, no flush-to-zero).
    pub(crate) fn new(entry: EntryFn, arg: *mut u8, gostart: usize) -> Self {
        SwitchFrame {
            x19: arg as usize,
            x20: entry as usize,
            x21_x28: [0; 8],
            x29: 0,
            x30: gostart,
            d8_d15: [0; 8],
            fpcr: 0,
            _pad: 0,
        }
    }
}

/// Unused on aarch64 (goro_restore reads fpcr itself, which is cheap).
pub(crate) fn fp_state() -> u64 {
    0
}
