// goro context switch for aarch64 (AAPCS64).
//
// Same design as asm/x86_64.S (read that file first); only the differences
// are described here. The layout shared with Rust is `SwitchFrame` in
// runtime/arch/aarch64.rs.
//
// A suspended context (gobuf.sp points at the lowest word), 176 bytes:
//
//     +160  padding (16)
//     +144  d14, d15
//     +128  d12, d13
//     +112  d10, d11
//     +96   d8,  d9
//     +80   x29 (fp), x30 (lr = where the context resumes)
//     +64   x27, x28
//     +48   x25, x26
//     +32   x23, x24
//     +16   x21, x22
//     +0    x19, x20          <- gobuf.sp (16-byte aligned)
//
// ABI checklist. Saved: x19-x29, lr, sp (in the gobuf), the low 64 bits of
// v8-v15 (d8-d15; AAPCS64 makes only those callee-saved). Not saved: x0-x18
// and the rest of the vector registers (caller-saved; every switch is a
// call), nzcv and fpsr (not preserved across calls by the ABI), and fpcr:
// Rust assumes the default floating-point environment (see asm/x86_64.S);
// asynchronous preemption restores it with everything else. x18 is the
// platform register and is not touched.

    .text

// goro_asm_start / goro_asm_end bound this file's code: no async
// preemption at a pc between them (preempt.rs).
    .globl goro_asm_start
goro_asm_start:

// FRAME_CFI: where a SwitchFrame holds each callee-saved register, for a
// CFA of sp + 176 (used where the frame is pushed and where it is popped).
    .macro FRAME_CFI
    .cfi_offset x19, -176
    .cfi_offset x20, -168
    .cfi_offset x21, -160
    .cfi_offset x22, -152
    .cfi_offset x23, -144
    .cfi_offset x24, -136
    .cfi_offset x25, -128
    .cfi_offset x26, -120
    .cfi_offset x27, -112
    .cfi_offset x28, -104
    .cfi_offset x29, -96
    .cfi_offset x30, -88
    .cfi_offset d8, -80
    .cfi_offset d9, -72
    .cfi_offset d10, -64
    .cfi_offset d11, -56
    .cfi_offset d12, -48
    .cfi_offset d13, -40
    .cfi_offset d14, -32
    .cfi_offset d15, -24
    .endm

// SAVE_FRAME: push a SwitchFrame (callee-saved registers, d8-d15) with CFI
// for each. Clobbers nothing else.
    .macro SAVE_FRAME
    sub sp, sp, #176                // room for the frame
    .cfi_def_cfa_offset 176
    stp x19, x20, [sp, #0]          // callee-saved GPRs
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]         // frame pointer and return address
    stp d8, d9, [sp, #96]           // callee-saved FP halves
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    // CFI for every saved register (CFA = sp + 176), so unwinders and
    // debuggers recover the caller's x19-x30 and d8-d15 through a switch.
    FRAME_CFI

    .endm

// fn goro_switch(save_sp: *mut usize /* x0 */, new_sp: usize /* x1 */)
    .globl goro_switch
    .type goro_switch,%function
    .p2align 4
goro_switch:
    .cfi_startproc
    SAVE_FRAME
    mov x9, sp
    str x9, [x0]                    // *save_sp = sp: suspended
    mov sp, x1                      // adopt the target's stack
    b goro_restore
    .cfi_endproc
    .size goro_switch, .-goro_switch

// fn goro_gogo(sp: usize /* x0 */) -> !
    .globl goro_gogo
    .type goro_gogo,%function
    .p2align 4
goro_gogo:
    .cfi_startproc
    mov sp, x0                      // adopt the target's stack
    b goro_restore
    .cfi_endproc
    .size goro_gogo, .-goro_gogo

// goro_restore: internal tail of switch/gogo. sp points at a SwitchFrame.
    .type goro_restore,%function
    .p2align 4
goro_restore:
    .cfi_startproc
    .cfi_def_cfa sp, 176
    FRAME_CFI
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    add sp, sp, #176
    .cfi_def_cfa_offset 0
    ret                             // to x30: into the resumed context
    .cfi_endproc
    .size goro_restore, .-goro_restore

// fn goro_mcall(save_sp: *mut usize /* x0 */, g0_sp: usize /* x1 */,
//               f: extern "C" fn(*mut u8) -> ! /* x2 */, arg: *mut u8 /* x3 */)
    .globl goro_mcall
    .type goro_mcall,%function
    .p2align 4
goro_mcall:
    .cfi_startproc
    SAVE_FRAME
    mov x9, sp
    str x9, [x0]                    // *save_sp = sp: the goroutine is suspended
    mov sp, x1                      // onto g0's stack
    .cfi_undefined x30              // g0 frames below do not unwind into the G
    mov x29, #0                     // end of the frame-pointer chain
    mov x0, x3                      // f's argument
    blr x2                          // f(arg): never returns
    brk #0xdead
    .cfi_endproc
    .size goro_mcall, .-goro_mcall

// goro_gostart: first code of a new goroutine; x19 = argument, x20 = entry.
    .globl goro_gostart
    .type goro_gostart,%function
    .p2align 4
goro_gostart:
    .cfi_startproc
    .cfi_undefined x30              // outermost frame of the goroutine
    mov x29, #0                     // end of the frame-pointer chain
    mov x0, x19                     // entry argument
    blr x20                         // entry(arg): never returns
    brk #0xdead
    .cfi_endproc
    .size goro_gostart, .-goro_gostart

// goro_async_preempt: entered by a rewritten signal context (see
// asm/x86_64.S). x0 = copy of the kernel's signal frame (its siginfo, where
// rt_sigreturn wants sp), x1 = async_preempt; sp 16-byte aligned below the
// copy. aarch64 has no register to jump through once x0-x30 are restored,
// so resuming through rt_sigreturn is the only exact way, not just the
// simplest.
    .globl goro_async_preempt
    .type goro_async_preempt,%function
    .p2align 4
goro_async_preempt:
    .cfi_startproc
    .cfi_undefined x30              // the interrupted context is in the copy
    blr x1                          // x0 = async_preempt(frame)
    mov sp, x0                      // rt_sigreturn reads the frame at sp
    mov x8, #139                    // __NR_rt_sigreturn
    svc #0                          // resumes the interrupted context
    brk #0xdead                     // never returns
    .cfi_endproc
    .size goro_async_preempt, .-goro_async_preempt

    .globl goro_asm_end
goro_asm_end:
