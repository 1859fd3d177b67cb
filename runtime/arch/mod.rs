//! Context switching: the binding to the hand-written assembly in `asm/`.
//!
//! Go's gogo/mcall, with one representation for a suspended context: all
//! callee-saved state is pushed on the context's own stack and the only
//! thing kept elsewhere is the resulting stack pointer (the `Gobuf`). The
//! per-architecture module (one file per arch, swapped whole) owns the frame
//! layout and builds the first frame of a new goroutine.

#[cfg(target_arch = "aarch64")]
#[path = "aarch64.rs"]
mod imp;
#[cfg(target_arch = "x86_64")]
#[path = "x86_64.rs"]
mod imp;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("goro supports only x86_64 and aarch64");

// ThreadSanitizer's fiber annotations (docs/TESTING.md): the real ones
// under `--cfg goro_tsan`, zero-sized no-ops otherwise.
#[cfg(goro_tsan)]
#[path = "fiber_tsan.rs"]
mod fiber;
#[cfg(not(goro_tsan))]
#[path = "fiber_none.rs"]
mod fiber;

pub(crate) use fiber::{Fiber, MFibers};

use imp::{mcall_raw, switch_raw};
pub(crate) use imp::{
    sigframe_relocate, sigframe_set_altstack, sigframe_start, uc_in_syscall, uc_pc_sp, uc_redirect,
    SwitchFrame, FRAME_ALIGN, RED_ZONE,
};

/// The signals the interrupted context blocks (bit n - 1 for signal n):
/// the mask rt_sigreturn restores. The field has the same name and type
/// on both architectures. Async-signal-safe (a read).
///
/// # Safety
/// `ctx` is the ucontext a signal handler received.
pub(crate) unsafe fn uc_sigmask(ctx: *mut libc::c_void) -> u64 {
    // SAFETY: guaranteed by the caller.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    crate::signal_unix::sigset_bits(&uc.uc_sigmask)
}

/// Entry point of a goroutine's first run, called by `goro_gostart` on the
/// goroutine's own stack. Must never return (it ends in goexit).
pub(crate) type EntryFn = unsafe extern "C" fn(arg: *mut u8) -> !;

/// Function run on g0 by [`mcall`]. Must never return.
pub(crate) type McallFn = unsafe extern "C" fn(arg: *mut u8) -> !;

/// A suspended execution context: the stack pointer at which a
/// [`SwitchFrame`] was pushed. Go's gobuf (which also holds pc, bp, ctxt: here
/// they live in the frame on the stack).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Gobuf {
    /// Stack pointer of the suspended context, 16-byte aligned; 0 when the
    /// context is running or has never been created.
    pub(crate) sp: usize,
}

// goro_switch and goro_mcall save only the registers Rust's inline asm
// cannot declare clobbered (asm/*.S, "Who saves what"): call them only
// through the `asm!` wrappers `switch_raw` / `mcall_raw` in the arch
// module, never as plain `extern "C"` functions.
extern "C" {
    fn goro_switch(save_sp: *mut usize, new_sp: usize);
    fn goro_gogo(sp: usize) -> !;
    fn goro_mcall(save_sp: *mut usize, g0_sp: usize, f: McallFn, arg: *mut u8);
    fn goro_gostart();
    fn goro_async_preempt();
    static goro_asm_start: u8;
    static goro_asm_end: u8;
}

/// The async-preemption trampoline's address (asm/*.S).
pub(crate) fn async_preempt_pc() -> usize {
    goro_async_preempt as *const () as usize
}

/// The [start, end) range of goro's assembly: never an async safe point.
pub(crate) fn asm_range() -> (usize, usize) {
    // Only the labels' addresses are taken, never their contents.
    (
        core::ptr::addr_of!(goro_asm_start) as usize,
        core::ptr::addr_of!(goro_asm_end) as usize,
    )
}

/// Symmetric switch: suspend the current context into `save` and resume the
/// context whose stack pointer is `to`, whose TSan fiber is `fiber`.
/// Returns when something resumes `save`.
///
/// # Safety
/// `to` must be the sp of a suspended context (saved by `switch`, `mcall` or
/// built by [`init_frame`]) that nothing else resumes concurrently, and its
/// stack must stay mapped while it runs; `fiber` is that context's.
#[inline(always)]
pub(crate) unsafe fn switch(save: *mut Gobuf, to: usize, fiber: Fiber) {
    // SAFETY: guaranteed by the caller; `Gobuf` is repr(C) with sp first;
    // the stack switch follows the fiber switch at once.
    unsafe {
        fiber.switch_to();
        switch_raw(save.cast(), to)
    }
}

/// Go's gogo: abandon the current context and resume `sp`, whose TSan
/// fiber is `fiber`.
///
/// # Safety
/// As for [`switch`]; additionally the current stack's frames are dead after
/// this call (only g0 does this: its frames are discarded at every mcall).
#[inline(always)]
pub(crate) unsafe fn gogo(sp: usize, fiber: Fiber) -> ! {
    // SAFETY: the caller guarantees `sp` is a suspended context nothing
    // else resumes, `fiber` is its fiber, and that the current stack's
    // frames are dead (g0); the stack switch follows the fiber switch.
    unsafe {
        fiber.switch_to();
        goro_gogo(sp)
    }
}

/// Go's mcall: suspend the current goroutine into `save`, switch to the g0
/// stack at `g0_sp` (TSan fiber `g0`) and run `f(arg)` there. Returns when
/// the goroutine is resumed with gogo.
///
/// # Safety
/// `g0_sp` must be the 16-byte aligned base of the current M's g0 stack with
/// no live frames below it, and `g0` its fiber; `f` must not return; `save`
/// must stay valid until the goroutine is resumed.
#[inline(always)]
pub(crate) unsafe fn mcall(save: *mut Gobuf, g0_sp: usize, g0: Fiber, f: McallFn, arg: *mut u8) {
    // SAFETY: the caller guarantees g0_sp is this M's empty g0 base and
    // `g0` its fiber, `f` never returns and `save` outlives the
    // suspension; the stack switch follows the fiber switch.
    unsafe {
        g0.switch_to();
        mcall_raw(save.cast(), g0_sp, f, arg)
    }
}

/// Lays out the first frame of a new context below `top` so that resuming it
/// calls `entry(arg)` on that stack. Returns the sp to resume.
///
/// # Safety
/// `top` must be 16-byte aligned, writable, with at least
/// `size_of::<SwitchFrame>()` bytes below it.
pub(crate) unsafe fn init_frame(top: usize, entry: EntryFn, arg: *mut u8) -> usize {
    let sp = (top - core::mem::size_of::<SwitchFrame>()) & !15;
    let frame = SwitchFrame::new(entry, arg, goro_gostart as *const () as usize);
    // SAFETY: the caller guarantees [sp, top) is writable and aligned.
    unsafe { (sp as *mut SwitchFrame).write(frame) };
    sp
}

/// Hints the CPU to fetch the cache line at `addr` for writing (Go's
/// prefetcht0, here `prefetchw` / `prfm pstl1keep`). Never faults,
/// whatever `addr` is, and changes no state a program can observe.
#[inline(always)]
pub(crate) fn prefetch_write(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and never faults.
    unsafe {
        core::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("prfm pstl1keep, [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly))
    };
}

/// Benchmark: `iters` round trips main -> coroutine -> main with [`switch`].
pub(crate) fn bench_switch(iters: u64) -> std::time::Duration {
    struct Ctx {
        main: Gobuf,
        co: Gobuf,
        main_fiber: Fiber,
        co_fiber: Fiber,
    }
    unsafe extern "C" fn co_entry(arg: *mut u8) -> ! {
        let ctx = arg.cast::<Ctx>();
        loop {
            // SAFETY: ctx outlives the benchmark; main resumes us each time.
            unsafe { switch(&mut (*ctx).co, (*ctx).main.sp, (*ctx).main_fiber) };
        }
    }
    let st = crate::stack::alloc(crate::stack::round_size(64 << 10)).expect("bench stack");
    let mut ctx = Ctx {
        main: Gobuf::default(),
        co: Gobuf::default(),
        main_fiber: Fiber::current(),
        co_fiber: Fiber::create(),
    };
    let ctxp: *mut Ctx = &mut ctx;
    // SAFETY: fresh stack; top is 16-byte aligned; ctxp is live.
    unsafe { (*ctxp).co.sp = init_frame(st.hi, co_entry, ctxp.cast()) };
    let t0 = std::time::Instant::now();
    for _ in 0..iters {
        // SAFETY: the coroutine context is suspended and only we resume it.
        unsafe { switch(&mut (*ctxp).main, (*ctxp).co.sp, (*ctxp).co_fiber) };
    }
    let el = t0.elapsed();
    // SAFETY: the coroutine is suspended for good: its fiber is not
    // current and never switched to again.
    unsafe { (*ctxp).co_fiber.destroy() };
    crate::stack::free(st);
    el
}
