//! Go's `golang.org/x/sync/errgroup`: goroutines working on subtasks of
//! one task, waited for together, the first error kept and (with
//! [`Group::with_context`]) cancelling the others.
//!
//! ```
//! use goro::{context, errgroup::Group};
//! goro::run(|| {
//!     let (g, ctx) = Group::<String>::with_context(&context::background());
//!     for i in 0..10 {
//!         let ctx = ctx.clone();
//!         g.go(move || {
//!             if i == 3 {
//!                 return Err(format!("task {i} failed"));
//!             }
//!             // The others see the cancellation.
//!             let _ = ctx.done().recv();
//!             Ok(())
//!         });
//!     }
//!     assert_eq!(g.wait(), Err("task 3 failed".to_string()));
//! });
//! ```

use crate::context::{CancelFunc, Context};
use crate::sync::{Mutex, Semaphore, WaitGroup};
use std::any::Any;
use std::sync::Arc;

/// A collection of goroutines working on subtasks of one task (Go's
/// `errgroup.Group`). Clone it to call [`go`](Group::go) from inside the
/// group's own goroutines (an `Arc` clone; all clones are the same group).
///
/// Unlike Go's (before x/sync 0.11), a panic in a group goroutine is
/// caught, cancels the group's context like an error, and is resumed by
/// [`wait`](Group::wait) once every goroutine has finished, so a panic is
/// never lost and never kills an unrelated goroutine.
pub struct Group<E> {
    inner: Arc<Inner<E>>,
}

impl<E> Clone for Group<E> {
    fn clone(&self) -> Self {
        Group {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<E> {
    wg: WaitGroup,
    /// The first error; later ones are dropped (Go's errOnce).
    err: Mutex<Option<E>>,
    /// The first panic's payload.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    cancel: Option<CancelFunc>,
    /// Permits for [`Group::set_limit`]; None = no limit.
    sem: Mutex<Option<Arc<Semaphore>>>,
}

impl<E: Send + 'static> Default for Group<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Send + 'static> Group<E> {
    /// A group with no context and no limit (Go's zero `errgroup.Group`).
    /// Never blocks and does not start the runtime.
    pub fn new() -> Group<E> {
        Group::build(None)
    }

    /// A group and a context derived from `ctx` that is cancelled the
    /// first time a goroutine of the group returns an error (or panics),
    /// or when [`wait`](Group::wait) returns, whichever comes first (Go's
    /// `errgroup.WithContext`).
    pub fn with_context(ctx: &Context) -> (Group<E>, Context) {
        let (ctx, cancel) = crate::context::with_cancel(ctx);
        (Group::build(Some(cancel)), ctx)
    }

    fn build(cancel: Option<CancelFunc>) -> Group<E> {
        Group {
            inner: Arc::new(Inner {
                wg: WaitGroup::new(),
                err: Mutex::new(None),
                panic: Mutex::new(None),
                cancel,
                sem: Mutex::new(None),
            }),
        }
    }

    /// Limits the group to `n` goroutines running [`go`](Group::go)'s
    /// functions at once; `None` removes the limit (Go's `SetLimit`, with
    /// a negative n as None).
    ///
    /// `Some(0)` makes every `go` block and every `try_go` fail, as in Go;
    /// any larger `n` is accepted (one above `u32::MAX` limits nothing in
    /// practice).
    ///
    /// Panics if `n` is `Some` and a goroutine of the group is running
    /// under a limit (as Go's does): a limit must be set before the first
    /// `go`, or after `wait`. Removing it (`None`) never panics, as in Go
    /// (whose check comes after its return for n < 0): the running
    /// goroutines give their permits back to the old limit, and a `go`
    /// already waiting for one still waits for it, as in Go; later calls
    /// are not limited (before h43 this panicked too). Never blocks.
    pub fn set_limit(&self, n: Option<usize>) {
        let mut sem = self.inner.sem.lock();
        if let (Some(_), Some(s)) = (n, sem.as_ref()) {
            assert!(
                Arc::strong_count(s) == 1,
                "errgroup: modify limit while goroutines in the group are still active"
            );
        }
        // A Semaphore holds at most u32::MAX permits; Go accepts any int
        // (a channel of zero-sized tokens), and no process runs more than
        // u32::MAX goroutines, so a larger limit is that one (before h43
        // it panicked in Semaphore::new).
        *sem = n.map(|n| Arc::new(Semaphore::new(n.min(u32::MAX as usize))));
    }

    /// Runs `f` in a new goroutine of the group (Go's `g.Go`). With a
    /// limit set, first waits (parks the goroutine, blocks a thread) until
    /// fewer than the limit are running. The first `Err` is kept for
    /// [`wait`](Group::wait) and cancels the group's context; later ones
    /// are dropped.
    ///
    /// Panics if the goroutine cannot be created (as [`crate::spawn`]);
    /// the group is then as if this `go` had not been called (its permit
    /// given back, `wait` not waiting for it).
    #[track_caller]
    pub fn go<F>(&self, f: F)
    where
        F: FnOnce() -> Result<(), E> + Send + 'static,
    {
        let sem = self.inner.sem.lock().clone();
        if let Some(s) = &sem {
            s.acquire();
        }
        self.start(sem, f);
    }

    /// [`go`](Group::go) if fewer than the limit are running now;
    /// otherwise returns `false` without running `f` (Go's `TryGo`). Never
    /// blocks for long.
    #[track_caller]
    pub fn try_go<F>(&self, f: F) -> bool
    where
        F: FnOnce() -> Result<(), E> + Send + 'static,
    {
        let sem = self.inner.sem.lock().clone();
        if let Some(s) = &sem {
            if !s.try_acquire() {
                return false;
            }
        }
        self.start(sem, f);
        true
    }

    #[track_caller]
    fn start<F>(&self, sem: Option<Arc<Semaphore>>, f: F)
    where
        F: FnOnce() -> Result<(), E> + Send + 'static,
    {
        self.inner.wg.add(1);
        let finish = Finish {
            inner: self.inner.clone(),
            sem,
        };
        // Dropping the handle detaches the goroutine; `wait` joins through
        // the WaitGroup. If the spawn fails, the closure is dropped unrun
        // and `finish` with it: the permit and the count are given back,
        // so `wait` does not wait for a goroutine that never existed.
        let spawned = crate::proc::spawn_with(
            move || {
                let finish = finish;
                let inner = &finish.inner;
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let mut first = inner.err.lock();
                        if first.is_none() {
                            *first = Some(e);
                            drop(first);
                            if let Some(c) = &inner.cancel {
                                c.cancel();
                            }
                        }
                    }
                    Err(payload) => inner.panicked(payload),
                }
                // The goroutine's locals die with it, before `finish`
                // marks it done, so `wait` sees them dropped (as `join`
                // and `scope` do), and a destructor's panic is the
                // goroutine's (as in crate::local::drop_locals_into).
                // Before h43 they were dropped in the goroutine's
                // epilogue, after `done`: `wait` could return while their
                // destructors had not run, and a panic there was lost.
                if let Err(payload) = std::panic::catch_unwind(crate::local::drop_locals) {
                    inner.panicked(payload);
                }
            },
            None,
            None,
        );
        if let Err(e) = spawned {
            panic!("goro::errgroup::Group::go: {e}");
        }
    }

    /// Waits (parks the goroutine, blocks a thread) until every goroutine
    /// started by [`go`](Group::go) has returned (its goroutine-locals
    /// dropped), cancels the group's
    /// context, and returns the first error (Go's `g.Wait`). If a group
    /// goroutine panicked, resumes that panic here instead
    /// (`std::panic::resume_unwind`). The error is taken: a second `wait`
    /// returns `Ok(())` unless new goroutines failed.
    pub fn wait(&self) -> Result<(), E> {
        self.inner.wg.wait();
        if let Some(c) = &self.inner.cancel {
            c.cancel();
        }
        if let Some(p) = self.inner.panic.lock().take() {
            std::panic::resume_unwind(p);
        }
        match self.inner.err.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl<E> Inner<E> {
    /// A group goroutine panicked: keeps the first payload for `wait`
    /// (later ones are dropped) and cancels the group's context.
    fn panicked(&self, payload: Box<dyn Any + Send>) {
        let mut first = self.panic.lock();
        if first.is_none() {
            *first = Some(payload);
        }
        drop(first);
        if let Some(c) = &self.cancel {
            c.cancel();
        }
    }
}

/// A group goroutine's last act, also when its spawn fails and its
/// closure is dropped unrun, or when dropping a later error (or panic
/// payload) panics (h27: both left the count up and the permit taken,
/// and `wait` waited for ever): releases the permit, then marks the
/// goroutine done.
struct Finish<E> {
    inner: Arc<Inner<E>>,
    sem: Option<Arc<Semaphore>>,
}

impl<E> Drop for Finish<E> {
    fn drop(&mut self) {
        // The permit's Arc is dropped here, before `done`: once `wait`
        // returns, no goroutine holds it and `set_limit` may change it.
        if let Some(s) = self.sem.take() {
            s.release();
        }
        self.inner.wg.done();
    }
}

impl<E> std::fmt::Debug for Group<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").finish_non_exhaustive()
    }
}
