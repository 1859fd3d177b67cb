//! The build without ThreadSanitizer: `fiber_tsan.rs`'s interface with
//! nothing inside. Every handle is zero-sized and every call compiles to
//! nothing.

/// No fiber state without TSan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fiber;

impl Fiber {
    pub(crate) const NONE: Fiber = Fiber;

    #[inline(always)]
    pub(crate) fn current() -> Fiber {
        Fiber
    }

    #[inline(always)]
    pub(crate) fn create() -> Fiber {
        Fiber
    }

    /// # Safety
    /// None needed here; kept `unsafe` to match `fiber_tsan.rs`.
    #[inline(always)]
    pub(crate) unsafe fn destroy(self) {}

    /// # Safety
    /// None needed here; kept `unsafe` to match `fiber_tsan.rs`.
    #[inline(always)]
    pub(crate) unsafe fn switch_to(self) {}
}

/// No per-M fiber state without TSan.
#[derive(Debug)]
pub(crate) struct MFibers;

impl MFibers {
    pub(crate) const fn new() -> MFibers {
        MFibers
    }

    #[inline(always)]
    pub(crate) fn init(&self) {}

    #[inline(always)]
    pub(crate) fn g0(&self) -> Fiber {
        Fiber
    }

    #[inline(always)]
    pub(crate) fn thread(&self) -> Fiber {
        Fiber
    }

    #[inline(always)]
    pub(crate) fn g0_for_mcall(&self) -> Fiber {
        Fiber
    }

    #[inline(always)]
    pub(crate) fn release(&self) {}
}
