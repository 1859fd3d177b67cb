// goro context switch for x86_64 (System V AMD64 ABI).
//
// Ported in spirit from Go's runtime/asm_amd64.s (gogo, mcall, goexit) but
// with a different representation of a suspended goroutine: instead of a
// gobuf holding pc/sp/bp, all callee-saved state is pushed onto the
// goroutine's own stack and the gobuf holds only the resulting stack pointer
// (as corosensei and boost.context do). The layout shared with Rust lives in
// runtime/arch/x86_64.rs (`SwitchFrame`), which asserts the offsets below.
//
// A suspended context (gobuf.sp points at the lowest word), 32 bytes:
//
//     high addresses
//     +---------------------+
//     | return address      |  +24   where the context resumes
//     | rbp                 |  +16
//     | rbx                 |  +8
//     | (scratch: r12)      |  +0    keeps gobuf.sp 16-byte aligned
//     +---------------------+  <- gobuf.sp (16-byte aligned)
//     low addresses
//
// A fresh goroutine's stack is laid out by Rust (arch::init_frame) as the
// same frame with rbx = argument, the scratch word = entry function (the
// restore loads it into r12) and the return address = goro_gostart, so the
// first gogo "returns" into the trampoline.
//
// Who saves what (corosensei's split). goro_switch and goro_mcall save
// only what Rust's inline asm cannot declare clobbered: rbx (LLVM's) and
// rbp (the frame pointer), plus the resume address. Their only callers are
// the `asm!` blocks in runtime/arch/mod.rs, which declare r12-r15 and
// every caller-saved register clobbered (`clobber_abi("C")`), so the
// compiler keeps across a switch only what is live there, and nothing in a
// loop that carries nothing. Do not call these routines from anywhere else:
// to a plain `extern "C"` caller they break the ABI (r12-r15 come back
// changed).
//
// ABI checklist. Preserved across a switch: rbx, rbp, rsp (in the gobuf)
// here; r12-r15 by the compiler at the call site. Not saved, deliberately:
// caller-saved GPRs and all vector registers (every switch is a call, so
// the caller has already spilled them), the x87 status word and
// stack (empty at a call by ABI), rflags except DF (DF is clear at every
// call by ABI), and the MXCSR / x87 control words: Rust assumes the default
// floating-point environment everywhere (changing it is undefined
// behaviour; `_mm_setcsr` is deprecated for that reason), and Go does not
// save them on gogo either. An asynchronous preemption, which can stop code
// at any instruction, saves and restores the complete FP state through the
// kernel's signal frame (goro_async_preempt below).

    .text
    // Intel syntax (global_asm!'s default on x86_64).

// goro_asm_start / goro_asm_end bound this file's code: the SIGURG
// handler never preempts at a pc between them (preempt.rs).
// LOAD_M reg: reg = this thread's M (goro_tls_m, initial-exec TLS, below).
.macro LOAD_M reg
    mov \reg, qword ptr [rip + goro_tls_m@GOTTPOFF]
    mov \reg, qword ptr fs:[\reg]
.endm

    .globl goro_asm_start
goro_asm_start:

// SAVE_FRAME: push a SwitchFrame (rbp, rbx and a scratch word) below the
// return address, with CFI for each saved slot. Clobbers nothing else, so
// rdi..r9 still hold the routine's arguments.
    .macro SAVE_FRAME
    push rbp                        // callee-saved frame pointer
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbp, 0
    push rbx                        // reserved by LLVM: asm! cannot clobber it
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    sub rsp, 8                      // scratch word: the saved sp is 16-byte aligned
    .cfi_adjust_cfa_offset 8
    .endm

// fn goro_switch(save_sp: *mut usize /* rdi */, new_sp: usize /* rsi */)
// Saves the current context into *save_sp and resumes the one at new_sp.
// Returns when another switch/gogo resumes the saved context.
    .globl goro_switch
    .hidden goro_switch
    .type goro_switch,@function
    .p2align 4
goro_switch:
    .cfi_startproc
    SAVE_FRAME
    mov [rdi], rsp                  // *save_sp = sp: this context is now suspended
    mov rsp, rsi                    // adopt the target's stack
    jmp goro_restore                // pop the target's frame and return into it
    .cfi_endproc
    .size goro_switch, .-goro_switch

// fn goro_gogo(sp: usize /* rdi */) -> !
// Go's gogo: resume the suspended context at sp. The current context is
// abandoned (used on g0, whose frames are discarded at every mcall).
    .globl goro_gogo
    .hidden goro_gogo
    .type goro_gogo,@function
    .p2align 4
goro_gogo:
    .cfi_startproc
    mov rsp, rdi                    // adopt the target's stack
    // From here the resumed context is the caller: its SwitchFrame is at
    // sp, as at goro_restore's entry (as in goro_switch). The entry rules
    // would read the frame's scratch word as a return address.
    .cfi_def_cfa rsp, 32
    .cfi_offset rbp, -16
    .cfi_offset rbx, -24
    jmp goro_restore
    .cfi_endproc
    .size goro_gogo, .-goro_gogo

// goro_restore: internal tail of switch/gogo. rsp points at a SwitchFrame.
    .type goro_restore,@function
    .p2align 4
goro_restore:
    .cfi_startproc
    .cfi_def_cfa rsp, 32            // CFA = sp + frame size (24) + return address (8)
    .cfi_offset rbp, -16
    .cfi_offset rbx, -24
    pop r12                         // scratch word: a fresh frame's entry
                                    // (r12 is clobbered at every call site)
    .cfi_def_cfa rsp, 24
    pop rbx
    .cfi_def_cfa rsp, 16
    pop rbp
    .cfi_def_cfa rsp, 8
    pop rcx                         // resume address (rcx is caller-saved)
    .cfi_def_cfa rsp, 0
    .cfi_register rip, rcx
    jmp rcx                         // into the resumed context: an indirect
                                    // jump, predicted by target history,
                                    // where a `ret` would always miss the
                                    // return stack buffer after a stack swap
    .cfi_endproc
    .size goro_restore, .-goro_restore

// fn goro_mcall(save_sp: *mut usize /* rdi */, g0_sp: usize /* rsi */,
//               f: extern "C" fn(*mut u8) -> ! /* rdx */, arg: *mut u8 /* rcx */)
// Go's mcall: save the current goroutine's context into *save_sp, switch to
// the M's g0 stack at g0_sp (its fixed base: earlier g0 frames are dead) and
// call f(arg) there. f must never return; the goroutine resumes later when
// the scheduler gogo's its saved sp, which returns from goro_mcall.
    .globl goro_mcall
    .hidden goro_mcall
    .type goro_mcall,@function
    .p2align 4
goro_mcall:
    .cfi_startproc
    SAVE_FRAME
    mov [rdi], rsp                  // *save_sp = sp: the goroutine is suspended
    mov rsp, rsi                    // onto g0's stack (16-byte aligned base)
    .cfi_undefined rip              // g0 frames below do not unwind into the G
    mov rdi, rcx                    // f's argument
    call rdx                        // f(arg): never returns
    ud2                             // crash if it did
    .cfi_endproc
    .size goro_mcall, .-goro_mcall

// goro_gostart: first code a new goroutine runs, reached by the `ret` of
// goro_restore on a frame built by arch::init_frame. rbx = argument,
// r12 = extern "C" fn(*mut u8) -> ! entry. The entry runs the closure and
// exits through goexit (mcall), so it never returns. The undefined return
// address ends backtraces and unwinding here: the bottom of a goroutine.
    .globl goro_gostart
    .hidden goro_gostart
    .type goro_gostart,@function
    .p2align 4
goro_gostart:
    .cfi_startproc
    .cfi_undefined rip              // outermost frame of the goroutine
    mov rdi, rbx                    // entry argument
    call r12                        // entry(arg): never returns
    ud2
    .cfi_endproc
    .size goro_gostart, .-goro_gostart


// goro_async_preempt: not called; entered when the SIGURG handler rewrote
// an interrupted goroutine's context (preempt.rs). The interrupted state —
// every register, rflags, the full xsave state, the signal mask — sits in a
// copy of the kernel's signal frame on the goroutine's own stack, below the
// interrupted sp and its red zone:
//
//     interrupted rsp
//     | red zone (128)           |  untouched
//     | signal frame copy        |  rdi -> its start (pretcode slot)
//     +--------------------------+  <- rsp on entry (below the copy)
//
// In: rdi = frame copy, rsi = extern "C" fn(frame) -> frame (goro's
// async_preempt, which parks the goroutine and returns when it is resumed).
// Then rt_sigreturn on the copy restores the interrupted context exactly:
// the kernel reloads every register and the full FP/vector state with the
// feature mask it saved them with (xrstor), so nothing is left out whatever
// extensions (AVX-512, AMX) the CPU has.
    .globl goro_async_preempt
    .hidden goro_async_preempt
    .type goro_async_preempt,@function
    .p2align 4
goro_async_preempt:
    .cfi_startproc
    .cfi_undefined rip              // the interrupted context is in the copy
    and rsp, -16                    // ABI alignment for the call
    call rsi                        // frame = async_preempt(frame)
    // async_preempt returned inside a runtime critical section, so that
    // the altstack it wrote into the frame stays this thread's: end it
    // here, where no preemption lands (Rust's releasem).
    LOAD_M rdx
    dec dword ptr [rdx + {m_locks}]
    lea rsp, [rax + 8]              // sp = frame + 8, as after the handler's ret
    mov eax, 15                     // SYS_rt_sigreturn
    syscall                         // resumes the interrupted context
    ud2                             // never returns
    .cfi_endproc
    .size goro_async_preempt, .-goro_async_preempt

// The current M (Go's g.m through the TLS slot), and the readers that
// must be one step against migrating preemption (runtime/m.rs): a goroutine
// is never asynchronously preempted at a pc in this file, so each of these
// reads the thread's slot and uses it without a window in which it could
// resume on another thread. Initial-exec TLS: one load of the slot's
// offset from the GOT, then fs-relative; no call. Field offsets of the M
// come from Rust (global_asm! const operands).

    .pushsection .tbss,"awT",@nobits
    .p2align 3
    .globl goro_tls_m
    .hidden goro_tls_m
    .type goro_tls_m,@object
    .size goro_tls_m, 8
goro_tls_m:
    .zero 8
    .popsection

// goro_getm() -> *mut M (null on a plain thread).
    .globl goro_getm
    .hidden goro_getm
    .type goro_getm,@function
    .p2align 4
goro_getm:
    .cfi_startproc
    LOAD_M rax
    ret
    .cfi_endproc
    .size goro_getm, .-goro_getm

// goro_setm(mp).
    .globl goro_setm
    .hidden goro_setm
    .type goro_setm,@function
    .p2align 4
goro_setm:
    .cfi_startproc
    mov rax, qword ptr [rip + goro_tls_m@GOTTPOFF]
    mov qword ptr fs:[rax], rdi
    ret
    .cfi_endproc
    .size goro_setm, .-goro_setm

// goro_getg() -> m.curg, or null without an M.
    .globl goro_getg
    .hidden goro_getg
    .type goro_getg,@function
    .p2align 4
goro_getg:
    .cfi_startproc
    LOAD_M rax
    test rax, rax
    jz 7f
    mov rax, qword ptr [rax + {m_curg}]
7:
    ret
    .cfi_endproc
    .size goro_getg, .-goro_getg

// goro_acquirem() -> *mut M: m.locks += 1 (Go's acquirem) on this
// thread's M, if any; returns it.
    .globl goro_acquirem
    .hidden goro_acquirem
    .type goro_acquirem,@function
    .p2align 4
goro_acquirem:
    .cfi_startproc
    LOAD_M rax
    test rax, rax
    jz 7f
    inc dword ptr [rax + {m_locks}]
7:
    ret
    .cfi_endproc
    .size goro_acquirem, .-goro_acquirem

    .globl goro_asm_end
goro_asm_end:
