//! The call-frame information of goro's context-switch assembly lets an
//! unwinder that stops a thread at any instruction of it — a sampling
//! profiler's SIGPROF handler (pprof-rs walks the stack with libgcc's
//! unwinder), gdb, perf — find a consistent caller: the context being
//! left, the one being resumed, or none (the bottom of a goroutine). A
//! wrong rule makes it read a stack slot as a return address and walk on
//! through garbage.
//!
//! Checked here on the test binary's own `.eh_frame` (gimli), rule by
//! rule, so a mistake fails deterministically instead of once in many
//! millions of samples.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, NativeEndian, Register, UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection, ObjectSymbol};

#[cfg(target_arch = "x86_64")]
mod arch {
    use gimli::{Register, X86_64};
    pub const SP: Register = X86_64::RSP;
    pub const RA: Register = X86_64::RA;
    /// The callee-saved registers a SwitchFrame holds.
    pub const SAVED: [Register; 2] = [X86_64::RBP, X86_64::RBX];
    /// `goro_gogo`: `mov rsp, rdi` (3 bytes), then `jmp goro_restore`.
    pub const GOGO_JUMP: u64 = 3;
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use gimli::{AArch64, Register};
    pub const SP: Register = AArch64::SP;
    pub const RA: Register = AArch64::X30;
    pub const SAVED: [Register; 2] = [AArch64::X19, AArch64::X29];
    /// `goro_gogo`: `mov sp, x0`, then `b goro_restore`.
    pub const GOGO_JUMP: u64 = 4;
}

/// The CFA rule and the rules of the return address and `arch::SAVED` at
/// `pc` in this binary (addresses as linked: the section and symbol
/// addresses of the file, not of the running image).
fn rules_at(pc: u64) -> (CfaRule<usize>, Vec<(Register, String)>) {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let obj = object::File::parse(&*exe).unwrap();
    let sec = obj.section_by_name(".eh_frame").expect(".eh_frame");
    let data = sec.data().unwrap();
    let eh = EhFrame::new(data, NativeEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(t) = obj.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    let mut ctx = UnwindContext::new();
    let row = eh
        .unwind_info_for_address(&bases, &mut ctx, pc, EhFrame::cie_from_offset)
        .unwrap_or_else(|e| panic!("no unwind info at {pc:#x}: {e}"));
    let regs = [arch::RA]
        .into_iter()
        .chain(arch::SAVED)
        .map(|r| (r, format!("{:?}", row.register(r))))
        .collect();
    (row.cfa().clone(), regs)
}

/// The address of the local symbol `name` in this binary.
fn symbol(name: &str) -> u64 {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let obj = object::File::parse(&*exe).unwrap();
    obj.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("symbol {name} not found"))
        .address()
}

/// `goro_gogo` adopts the resumed context's stack and jumps to
/// `goro_restore`, which pops that context's SwitchFrame: at the jump the
/// stack pointer already points at the frame, so the rules there must be
/// `goro_restore`'s first ones (the resumed context is the caller), as
/// they are in `goro_switch` after its stack switch. Before (h44) they
/// were those of a function entry (CFA = sp + 8 on x86_64, return address
/// in x30 on aarch64): gdb stopped at that instruction showed the
/// SwitchFrame's scratch word, then a stack address, as return addresses.
#[test]
fn gogo_unwinds_into_the_resumed_context() {
    // Make sure the runtime (and so the assembly) is linked in.
    assert_eq!(goro::run(|| 1), 1);
    let gogo = symbol("goro_gogo");
    let restore = symbol("goro_restore");
    let (cfa, regs) = rules_at(gogo + arch::GOGO_JUMP);
    let (want_cfa, want_regs) = rules_at(restore);
    assert!(
        matches!(want_cfa, CfaRule::RegisterAndOffset { register, .. } if register == arch::SP),
        "goro_restore's CFA is not sp-based: {want_cfa:?}"
    );
    assert_eq!(
        (cfa, regs),
        (want_cfa, want_regs),
        "goro_gogo's jump to goro_restore does not unwind into the resumed context"
    );
}
