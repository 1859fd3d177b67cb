//! The runner and the spawn helper the loom models share
//! (spinning_model.rs, sema_model.rs, netpoll_model.rs,
//! find_runnable_model.rs, deadline_model.rs, iolock_model.rs;
//! docs/TESTING.md, "Model tests").

/// Runs `f` under loom and returns the number of interleavings explored
/// and the preemption bound used. `bound`: None explores every
/// interleaving; LOOM_MAX_PREEMPTIONS overrides it unless `exact` (a
/// broken variant, which must reach its counterexample at its own bound).
pub(crate) fn explore(
    bound: Option<usize>,
    exact: bool,
    f: impl Fn() + Sync + Send + 'static,
) -> (usize, Option<usize>) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let mut b = ::loom::model::Builder::new();
    if b.preemption_bound.is_none() || exact {
        b.preemption_bound = bound;
    }
    // Relaxed: a count read after `check` has joined every run.
    let n = std::sync::Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    b.check(move || {
        count.fetch_add(1, Relaxed);
        f()
    });
    (n.load(Relaxed), b.preemption_bound)
}

/// Runs `f` on a new loom thread with a clone of the model's shared state
/// `s` (every model's actors are spawned this way).
pub(crate) fn spawn<S: 'static, T: 'static>(
    s: &::loom::sync::Arc<S>,
    f: impl FnOnce(&S) -> T + 'static,
) -> ::loom::thread::JoinHandle<T> {
    let s = s.clone();
    ::loom::thread::spawn(move || f(&s))
}
