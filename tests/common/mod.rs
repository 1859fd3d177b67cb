//! Helpers shared by the integration tests (each tests/*.rs file is its own
//! crate and uses a subset, hence the dead_code allowance).
#![allow(dead_code)]

/// Whether the tests run under qemu-user (aarch64 in CI): heavy loops are
/// scaled down there.
pub fn qemu() -> bool {
    std::env::var("GORO_QEMU").is_ok_and(|v| v == "1")
}

/// `n`, or a tenth of it (at least 1) under qemu.
pub fn scale(n: usize) -> usize {
    if qemu() {
        (n / 10).max(1)
    } else {
        n
    }
}

/// goro::run, re-raising a panic of the goroutine on the test thread with
/// its message (resume_unwind on the caller prints nothing, and the panic
/// hook's own report goes to stderr rather than the failing test's output).
pub fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| goro::run(f))) {
        Ok(v) => v,
        Err(p) => {
            let msg = if let Some(s) = p.downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = p.downcast_ref::<String>() {
                s.clone()
            } else {
                "<non-string payload>".to_string()
            };
            panic!("goroutine panicked: {msg}")
        }
    }
}
