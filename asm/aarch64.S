// goro context switch for aarch64 (AAPCS64).
//
// Same design as asm/x86_64.S (read that file first); only the differences
// are described here. The layout shared with Rust is `SwitchFrame` in
// runtime/arch/aarch64.rs.
//
// A suspended context (gobuf.sp points at the lowest word), 32 bytes:
//
//     +16   x29 (fp), x30 (lr = where the context resumes)
//     +0    x19, scratch  <- gobuf.sp (16-byte aligned)
//
// As on x86_64, goro_switch and goro_mcall save only what Rust's inline
// asm cannot declare clobbered: x19 (LLVM's) and x29 (the frame pointer),
// plus lr. Their callers, the `asm!` blocks in runtime/arch/aarch64.rs,
// declare x20-x28, v8-v15 and every caller-saved register clobbered, so
// the compiler saves only what is live at each switch. The scratch word is
// loaded into x20 by the restore: garbage in a suspended context, the entry
// function in a fresh one.
//
// ABI checklist. Preserved across a switch: x19, x29, lr and sp (in the
// gobuf) here; x20-x28 and d8-d15 (AAPCS64 makes only the low 64 bits of
// v8-v15 callee-saved) by the compiler at the call site. Not saved: x0-x18
// and the rest of the vector registers (caller-saved; every switch is a
// call), nzcv and fpsr (not preserved across calls by the ABI), and fpcr:
// Rust assumes the default floating-point environment (see asm/x86_64.S);
// asynchronous preemption restores it with everything else. x18 is the
// platform register and is not touched.

    .text

// goro_asm_start / goro_asm_end bound this file's code: no async
// preemption at a pc between them (preempt.rs).
// LOAD_M dst, tmp: dst = this thread's M (goro_tls_m, initial-exec TLS).
.macro LOAD_M dst, tmp
    mrs \tmp, tpidr_el0
    adrp \dst, :gottprel:goro_tls_m
    ldr \dst, [\dst, :gottprel_lo12:goro_tls_m]
    ldr \dst, [\tmp, \dst]
.endm

    .globl goro_asm_start
goro_asm_start:

// FRAME_CFI: where a SwitchFrame holds each saved register, for a CFA of
// sp + 32 (used where the frame is pushed and where it is popped).
    .macro FRAME_CFI
    .cfi_offset x19, -32
    .cfi_offset x29, -16
    .cfi_offset x30, -8
    .endm

// SAVE_FRAME: push a SwitchFrame (x19, x29, lr) with CFI for each.
// Clobbers nothing else.
    .macro SAVE_FRAME
    sub sp, sp, #32                 // room for the frame
    .cfi_def_cfa_offset 32
    str x19, [sp, #0]               // reserved by LLVM: asm! cannot clobber it
    stp x29, x30, [sp, #16]         // frame pointer and return address
    FRAME_CFI
    .endm

// fn goro_switch(save_sp: *mut usize /* x0 */, new_sp: usize /* x1 */)
    .globl goro_switch
    .hidden goro_switch
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
    .hidden goro_gogo
    .type goro_gogo,%function
    .p2align 4
goro_gogo:
    .cfi_startproc
    mov sp, x0                      // adopt the target's stack
    // From here the resumed context is the caller: its SwitchFrame is at
    // sp, as at goro_restore's entry (as in goro_switch). The entry rules
    // would take x30 (gogo's own caller on g0) with the new sp.
    .cfi_def_cfa sp, 32
    FRAME_CFI
    b goro_restore
    .cfi_endproc
    .size goro_gogo, .-goro_gogo

// goro_restore: internal tail of switch/gogo. sp points at a SwitchFrame.
    .type goro_restore,%function
    .p2align 4
goro_restore:
    .cfi_startproc
    .cfi_def_cfa sp, 32
    FRAME_CFI
    ldp x19, x20, [sp, #0]          // x20: the scratch word (clobbered at
                                    // every call site; a fresh frame's entry)
    ldp x29, x30, [sp, #16]
    add sp, sp, #32
    .cfi_def_cfa_offset 0
    ret                             // to x30: into the resumed context
    .cfi_endproc
    .size goro_restore, .-goro_restore

// fn goro_mcall(save_sp: *mut usize /* x0 */, g0_sp: usize /* x1 */,
//               f: extern "C" fn(*mut u8) -> ! /* x2 */, arg: *mut u8 /* x3 */)
    .globl goro_mcall
    .hidden goro_mcall
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
    .hidden goro_gostart
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
    .hidden goro_async_preempt
    .type goro_async_preempt,%function
    .p2align 4
goro_async_preempt:
    .cfi_startproc
    .cfi_undefined x30              // the interrupted context is in the copy
    blr x1                          // x0 = async_preempt(frame)
    // async_preempt returned inside a runtime critical section, so that
    // the altstack it wrote into the frame stays this thread's: end it
    // here, where no preemption lands (Rust's releasem).
    LOAD_M x2, x3
    ldr w3, [x2, #{m_locks}]
    sub w3, w3, #1
    str w3, [x2, #{m_locks}]
    mov sp, x0                      // rt_sigreturn reads the frame at sp
    mov x8, #139                    // __NR_rt_sigreturn
    svc #0                          // resumes the interrupted context
    brk #0xdead                     // never returns
    .cfi_endproc
    .size goro_async_preempt, .-goro_async_preempt

// The current M and its readers that must be one step against migrating
// preemption: see asm/x86_64.S. Initial-exec TLS through tpidr_el0.
    .pushsection .tbss,"awT",@nobits
    .p2align 3
    .globl goro_tls_m
    .hidden goro_tls_m
    .type goro_tls_m,%object
    .size goro_tls_m, 8
goro_tls_m:
    .zero 8
    .popsection

// goro_getm() -> *mut M (null on a plain thread).
    .globl goro_getm
    .hidden goro_getm
    .type goro_getm,%function
    .p2align 4
goro_getm:
    .cfi_startproc
    LOAD_M x0, x1
    ret
    .cfi_endproc
    .size goro_getm, .-goro_getm

// goro_setm(mp).
    .globl goro_setm
    .hidden goro_setm
    .type goro_setm,%function
    .p2align 4
goro_setm:
    .cfi_startproc
    mrs x1, tpidr_el0
    adrp x2, :gottprel:goro_tls_m
    ldr x2, [x2, :gottprel_lo12:goro_tls_m]
    str x0, [x1, x2]
    ret
    .cfi_endproc
    .size goro_setm, .-goro_setm

// goro_getg() -> m.curg, or null without an M.
    .globl goro_getg
    .hidden goro_getg
    .type goro_getg,%function
    .p2align 4
goro_getg:
    .cfi_startproc
    LOAD_M x0, x1
    cbz x0, 1f
    ldr x0, [x0, #{m_curg}]
1:
    ret
    .cfi_endproc
    .size goro_getg, .-goro_getg

// goro_acquirem() -> *mut M: m.locks += 1 on this thread's M, if any.
    .globl goro_acquirem
    .hidden goro_acquirem
    .type goro_acquirem,%function
    .p2align 4
goro_acquirem:
    .cfi_startproc
    LOAD_M x0, x1
    cbz x0, 1f
    ldr w1, [x0, #{m_locks}]
    add w1, w1, #1
    str w1, [x0, #{m_locks}]
1:
    ret
    .cfi_endproc
    .size goro_acquirem, .-goro_acquirem

    .globl goro_asm_end
goro_asm_end:
