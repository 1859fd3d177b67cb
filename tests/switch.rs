//! The context switch preserves every callee-saved register the ABI
//! requires (x86_64 SysV: rbx, rbp, r12-r15; aarch64 AAPCS64: x19-x29,
//! d8-d15) across a goroutine switch, including one that resumes the
//! goroutine on another thread. The registers are set to known values in
//! inline assembly, a function that yields is called, and the values are
//! compared afterwards.

mod common;

#[allow(unused_imports)]
use common::{qemu, scale};

// A function that breaks the ABI on purpose: it zeroes a callee-saved
// register without restoring it.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl goro_test_clobber",
    "goro_test_clobber:",
    "xor r12d, r12d",
    "ret",
);
#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl goro_test_clobber",
    "goro_test_clobber:",
    "mov x21, #0",
    "ret",
);
extern "C" {
    fn goro_test_clobber();
}

extern "C" fn yield_c() {
    goro::yield_now();
}

/// Returns the OR of the differences (0 if every register survived).
#[cfg(target_arch = "x86_64")]
fn check_callee_saved(f: extern "C" fn()) -> u64 {
    let bad: u64;
    // SAFETY: saves and restores every register it changes; stays below
    // the red zone; the call keeps the ABI's 16-byte alignment.
    unsafe {
        core::arch::asm!(
            "sub rsp, 128",                 // skip the red zone
            "push rbx", "push rbp", "push r12", "push r13", "push r14", "push r15",
            "mov rax, rsp",
            "and rsp, -16",
            "push rax", "push rax",         // the saved-area pointer, alignment kept
            "mov rbx, 0x1111111111111111",
            "mov rbp, 0x2222222222222222",
            "mov r12, 0x3333333333333333",
            "mov r13, 0x4444444444444444",
            "mov r14, 0x5555555555555555",
            "mov r15, 0x6666666666666666",
            "call rdx",
            "xor r11, r11",
            "mov rcx, 0x1111111111111111", "xor rcx, rbx", "or r11, rcx",
            "mov rcx, 0x2222222222222222", "xor rcx, rbp", "or r11, rcx",
            "mov rcx, 0x3333333333333333", "xor rcx, r12", "or r11, rcx",
            "mov rcx, 0x4444444444444444", "xor rcx, r13", "or r11, rcx",
            "mov rcx, 0x5555555555555555", "xor rcx, r14", "or r11, rcx",
            "mov rcx, 0x6666666666666666", "xor rcx, r15", "or r11, rcx",
            "pop rax", "pop rax",
            "mov rsp, rax",
            "pop r15", "pop r14", "pop r13", "pop r12", "pop rbp", "pop rbx",
            "add rsp, 128",
            in("rdx") f,
            out("r11") bad,
            clobber_abi("C"),
        );
    }
    bad
}

#[cfg(target_arch = "aarch64")]
fn check_callee_saved(f: extern "C" fn()) -> u64 {
    let bad: u64;
    // SAFETY: saves and restores every register it changes; sp stays
    // 16-byte aligned.
    unsafe {
        core::arch::asm!(
            "sub sp, sp, #160",
            "stp x19, x20, [sp, #0]", "stp x21, x22, [sp, #16]", "stp x23, x24, [sp, #32]",
            "stp x25, x26, [sp, #48]", "stp x27, x28, [sp, #64]", "stp x29, x30, [sp, #80]",
            "stp d8, d9, [sp, #96]", "stp d10, d11, [sp, #112]",
            "stp d12, d13, [sp, #128]", "stp d14, d15, [sp, #144]",
            "mov x19, #0x1919", "mov x20, #0x2020", "mov x21, #0x2121", "mov x22, #0x2222",
            "mov x23, #0x2323", "mov x24, #0x2424", "mov x25, #0x2525", "mov x26, #0x2626",
            "mov x27, #0x2727", "mov x28, #0x2828", "mov x29, #0x2929",
            "mov x10, #0x0808", "fmov d8, x10",  "mov x10, #0x0909", "fmov d9, x10",
            "mov x10, #0x1010", "fmov d10, x10", "mov x10, #0x1111", "fmov d11, x10",
            "mov x10, #0x1212", "fmov d12, x10", "mov x10, #0x1313", "fmov d13, x10",
            "mov x10, #0x1414", "fmov d14, x10", "mov x10, #0x1515", "fmov d15, x10",
            "blr x9",
            "mov x10, #0",
            "mov x12, #0x1919", "eor x12, x12, x19", "orr x10, x10, x12",
            "mov x12, #0x2020", "eor x12, x12, x20", "orr x10, x10, x12",
            "mov x12, #0x2121", "eor x12, x12, x21", "orr x10, x10, x12",
            "mov x12, #0x2222", "eor x12, x12, x22", "orr x10, x10, x12",
            "mov x12, #0x2323", "eor x12, x12, x23", "orr x10, x10, x12",
            "mov x12, #0x2424", "eor x12, x12, x24", "orr x10, x10, x12",
            "mov x12, #0x2525", "eor x12, x12, x25", "orr x10, x10, x12",
            "mov x12, #0x2626", "eor x12, x12, x26", "orr x10, x10, x12",
            "mov x12, #0x2727", "eor x12, x12, x27", "orr x10, x10, x12",
            "mov x12, #0x2828", "eor x12, x12, x28", "orr x10, x10, x12",
            "mov x12, #0x2929", "eor x12, x12, x29", "orr x10, x10, x12",
            "fmov x11, d8",  "mov x12, #0x0808", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d9",  "mov x12, #0x0909", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d10", "mov x12, #0x1010", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d11", "mov x12, #0x1111", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d12", "mov x12, #0x1212", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d13", "mov x12, #0x1313", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d14", "mov x12, #0x1414", "eor x12, x12, x11", "orr x10, x10, x12",
            "fmov x11, d15", "mov x12, #0x1515", "eor x12, x12, x11", "orr x10, x10, x12",
            "ldp x19, x20, [sp, #0]", "ldp x21, x22, [sp, #16]", "ldp x23, x24, [sp, #32]",
            "ldp x25, x26, [sp, #48]", "ldp x27, x28, [sp, #64]", "ldp x29, x30, [sp, #80]",
            "ldp d8, d9, [sp, #96]", "ldp d10, d11, [sp, #112]",
            "ldp d12, d13, [sp, #128]", "ldp d14, d15, [sp, #144]",
            "add sp, sp, #160",
            in("x9") f,
            out("x10") bad,
            clobber_abi("C"),
        );
    }
    bad
}

/// Goroutines on two Ps check their callee-saved registers around
/// thousands of yields (some resuming on another thread), while others
/// keep every register busy with different values.
#[test]
fn switch_preserves_callee_saved_registers() {
    let _w = common::watchdog();
    common::run(|| {
        let rounds = scale(20_000);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                goro::spawn(move || {
                    let mut bad = 0u64;
                    for _ in 0..rounds {
                        bad |= check_callee_saved(yield_c);
                    }
                    bad
                })
            })
            .collect();
        for h in hs {
            assert_eq!(
                h.join().unwrap(),
                0,
                "a callee-saved register changed across a switch"
            );
        }
        // The check itself detects a change (a function that breaks the
        // ABI by clobbering a callee-saved register).
        // SAFETY: goro_test_clobber only zeroes one register and returns.
        let clobber: extern "C" fn() =
            unsafe { core::mem::transmute(goro_test_clobber as unsafe extern "C" fn()) };
        assert_ne!(
            check_callee_saved(clobber),
            0,
            "the check cannot see a clobbered register"
        );
    });
}
