//! Goroutine-local storage (`goroutine_local!`). Placeholder: the storage
//! itself is added by the sync issue; the scheduler already calls
//! `drop_locals` when a goroutine exits.

/// Drops the current goroutine's locals. Called on the goroutine's own
/// stack right after its closure returns (or panics).
pub(crate) fn drop_locals() {
    let gp = crate::m::getg();
    if gp.is_null() {
        return;
    }
    // SAFETY: the running G; `locals` is touched only by the G itself.
    let locals = unsafe { (*gp).locals.replace(core::ptr::null_mut()) };
    debug_assert!(locals.is_null(), "goroutine locals without an owner module");
}
