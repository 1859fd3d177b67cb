//! Go's `context` package: cancellation and deadlines that flow down a
//! tree of contexts, observed through a channel that closes.
//!
//! A [`Context`] is a cheap handle (an `Arc`). [`with_cancel`],
//! [`with_timeout`] and [`with_deadline`] derive a child from a parent;
//! cancelling a context cancels every context derived from it, never its
//! parent. A goroutine watches for cancellation with `recv(ctx.done())` in
//! a `select!` arm (the channel is closed, so every receive returns
//! `Err(RecvError)` at once and all watchers wake), or polls
//! [`Context::err`].
//!
//! ```
//! use std::time::Duration;
//! use goro::context;
//! goro::run(|| {
//!     let (ctx, cancel) = context::with_timeout(&context::background(), Duration::from_millis(20));
//!     let (tx, rx) = goro::chan::<u32>(0);
//!     let worker = goro::go!(move || goro::select! {
//!         recv(ctx.done()) -> _ => ctx.err(),
//!         recv(rx) -> _ => None,
//!     });
//!     assert_eq!(worker.join().unwrap(), Some(context::ContextError::DeadlineExceeded));
//!     cancel.cancel(); // Go's `defer cancel()`: releases the timer early
//!     drop(tx);
//! });
//! ```
//!
//! The algorithm is Go's (context.go, Go 1.19): a cancellable context
//! records its error under its lock, then closes `done`, then cancels the
//! children it had registered, then removes itself from its parent. A child
//! registers under the parent's lock and is cancelled at once if the parent
//! already has an error, so no child is ever missed: the parent's error is
//! set before its children list is taken, both under that lock.
//! Differences from Go: no `WithValue` (pass values as arguments or in
//! your own struct; Rust types them), no `Cause` (Go 1.20); dropping a
//! [`CancelFunc`] does not cancel (as in Go, where a lost cancel function
//! is a leak `go vet` reports): call [`CancelFunc::cancel`] when the work
//! is done. A child whose cancel function is dropped uncalled stays
//! registered with its parent only until the parent is cancelled or the
//! list is pruned (dead entries are dropped as the list grows).

use crate::chan::{Receiver, Sender};
use crate::sync::Mutex;
use crate::time::Timer;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Why a context is done: Go's `context.Canceled` and
/// `context.DeadlineExceeded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextError {
    /// The context (or an ancestor) was cancelled by its [`CancelFunc`].
    Canceled,
    /// The context's (or an ancestor's) deadline passed.
    DeadlineExceeded,
}

impl std::fmt::Display for ContextError {
    /// Go's error strings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContextError::Canceled => "context canceled",
            ContextError::DeadlineExceeded => "context deadline exceeded",
        })
    }
}

impl std::error::Error for ContextError {}

impl From<ContextError> for std::io::Error {
    /// `Canceled` becomes `ErrorKind::Interrupted`, `DeadlineExceeded`
    /// `ErrorKind::TimedOut` (what a socket deadline gives), so that `?`
    /// works in functions returning `io::Result`.
    fn from(e: ContextError) -> std::io::Error {
        let kind = match e {
            ContextError::Canceled => std::io::ErrorKind::Interrupted,
            ContextError::DeadlineExceeded => std::io::ErrorKind::TimedOut,
        };
        std::io::Error::new(kind, e)
    }
}

/// A cancellation signal and an optional deadline, shared by the
/// goroutines working on one request (Go's `context.Context`). Clone it to
/// hand it on (an `Arc` clone). Send and Sync.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    /// Closed (its only sender dropped) when the context is cancelled;
    /// never closed for [`background`].
    done: Receiver<()>,
    deadline: Option<Instant>,
    /// The nearest cancellable ancestor, which lists this context among its
    /// children (None under `background`).
    parent: Option<Arc<Inner>>,
    /// None for `background`, which can never be cancelled.
    state: Option<Mutex<State>>,
}

struct State {
    err: Option<ContextError>,
    /// Dropped on cancellation, which closes `done`.
    close: Option<Sender<()>>,
    /// Registered children, keyed by their address (live while registered:
    /// a child removes itself when cancelled; entries of children dropped
    /// uncancelled are pruned as the map grows).
    children: HashMap<usize, Weak<Inner>>,
    /// Size at which dead entries are next pruned.
    prune_at: usize,
    /// The deadline's timer, stopped when cancelled earlier.
    timer: Option<Timer>,
}

impl Drop for Inner {
    /// Frees a chain of ancestors held only by this context iteratively:
    /// the default recursive drop of a 20,000-deep chain (a loop deriving
    /// each context from the last) overflowed a goroutine's 256 KiB stack.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(p) = next {
            // into_inner: exactly one of several concurrent droppers gets
            // the value, so each ancestor is freed once, here or by the
            // last other holder.
            next = Arc::into_inner(p).and_then(|mut inner| inner.parent.take());
        }
    }
}

fn key(c: &Arc<Inner>) -> usize {
    Arc::as_ptr(c) as usize
}

/// The root context: never cancelled, no deadline (Go's
/// `context.Background()`, also its `TODO()`). Its `done()` channel never
/// becomes ready.
pub fn background() -> Context {
    static BACKGROUND: OnceLock<Context> = OnceLock::new();
    BACKGROUND
        .get_or_init(|| Context {
            inner: Arc::new(Inner {
                done: crate::chan::never(),
                deadline: None,
                parent: None,
                state: None,
            }),
        })
        .clone()
}

impl Context {
    /// A channel that is closed when this context is cancelled or its
    /// deadline passes (Go's `ctx.Done()`): use `recv(ctx.done())` in a
    /// `select!` arm, or `ctx.done().recv()` to wait (it returns
    /// `Err(RecvError)` once done). Never receives a value. For
    /// [`background`], a channel that never becomes ready.
    pub fn done(&self) -> &Receiver<()> {
        &self.inner.done
    }

    /// `None` while the context is live; once done, why (Go's `ctx.Err()`).
    /// Once `Some`, it never changes. Takes the context's lock briefly.
    pub fn err(&self) -> Option<ContextError> {
        self.inner.state.as_ref().and_then(|s| s.lock().err)
    }

    /// The time at which the context will be cancelled by its own or an
    /// ancestor's deadline, if any (Go's `ctx.Deadline()`). Never blocks
    /// (the deadline is fixed when the context is made).
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("deadline", &self.inner.deadline)
            .field("err", &self.err())
            .finish_non_exhaustive()
    }
}

/// Cancels the context it came with (Go's `context.CancelFunc`). Clone it
/// to cancel from several places; calls after the first do nothing.
/// Dropping it does **not** cancel.
#[derive(Clone)]
pub struct CancelFunc {
    inner: Arc<Inner>,
}

impl CancelFunc {
    /// Cancels the context and every context derived from it, with
    /// [`ContextError::Canceled`] unless it is already done; closes their
    /// `done()` channels, stops a pending deadline timer and removes the
    /// context from its parent. Never blocks for long (the contexts' locks).
    /// Go's `cancel()`; call it when the work is done, as Go's
    /// `defer cancel()` does, to release the timer and the parent's entry.
    pub fn cancel(&self) {
        cancel(&self.inner, true, ContextError::Canceled);
    }
}

impl std::fmt::Debug for CancelFunc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelFunc").finish_non_exhaustive()
    }
}

/// A child of `parent` that is cancelled when the returned [`CancelFunc`]
/// is called or when `parent` is (Go's `context.WithCancel`). Never
/// blocks for long. If `parent` is already done, so is the child, with
/// the parent's error.
pub fn with_cancel(parent: &Context) -> (Context, CancelFunc) {
    new_child(parent, parent.inner.deadline)
}

/// A child of `parent` that is also cancelled, with
/// [`ContextError::DeadlineExceeded`], at `deadline` (Go's
/// `context.WithDeadline`). If the parent's deadline is earlier, this is
/// [`with_cancel`] (the parent's deadline comes first). A deadline already
/// past gives a context that is done at once. The timer is a runtime timer
/// (`goro::time::after_func`), stopped by an earlier cancel.
pub fn with_deadline(parent: &Context, deadline: Instant) -> (Context, CancelFunc) {
    if let Some(d) = parent.inner.deadline {
        if d <= deadline {
            return with_cancel(parent);
        }
    }
    let (ctx, cancel_fn) = new_child(parent, Some(deadline));
    let dur = deadline.saturating_duration_since(Instant::now());
    if dur.is_zero() {
        cancel(&ctx.inner, true, ContextError::DeadlineExceeded);
        return (ctx, cancel_fn);
    }
    // The timer holds a weak reference: a context nobody holds any more is
    // freed before its deadline (the timer then does nothing). Armed
    // outside the context's lock: adding a timer may drop other timers'
    // closures, whose destructors may do anything.
    let w = Arc::downgrade(&ctx.inner);
    let timer = crate::time::after_func(dur, move || {
        if let Some(c) = w.upgrade() {
            cancel(&c, true, ContextError::DeadlineExceeded);
        }
    });
    let state = ctx
        .inner
        .state
        .as_ref()
        .expect("a derived context has state");
    let mut st = state.lock();
    if st.err.is_none() {
        st.timer = Some(timer);
        drop(st);
    } else {
        // Cancelled meanwhile (by its parent): nothing left to time.
        drop(st);
        timer.stop();
    }
    (ctx, cancel_fn)
}

/// [`with_deadline`] at `now + timeout` (Go's `context.WithTimeout`). A
/// timeout too large to represent gives no deadline of its own. The
/// deadline is an `Instant` (ns resolution); the runtime timer behind it
/// typically fires 50-100 µs late (Linux's timer slack). Never blocks for
/// long (takes the parent's lock to register the child).
pub fn with_timeout(parent: &Context, timeout: Duration) -> (Context, CancelFunc) {
    match Instant::now().checked_add(timeout) {
        Some(d) => with_deadline(parent, d),
        None => with_cancel(parent),
    }
}

/// Go's newCancelCtx + propagateCancel.
fn new_child(parent: &Context, deadline: Option<Instant>) -> (Context, CancelFunc) {
    let (close, done) = crate::chan::chan::<()>(0);
    let parent_inner = parent.inner.state.is_some().then(|| parent.inner.clone());
    let child = Arc::new(Inner {
        done,
        deadline,
        parent: parent_inner,
        state: Some(Mutex::new(State {
            err: None,
            close: Some(close),
            children: HashMap::new(),
            prune_at: 8,
            timer: None,
        })),
    });
    if let Some(pstate) = &parent.inner.state {
        let mut ps = pstate.lock();
        match ps.err {
            Some(err) => {
                drop(ps);
                cancel(&child, false, err);
            }
            None => {
                if ps.children.len() >= ps.prune_at {
                    ps.children.retain(|_, w| w.strong_count() > 0);
                    ps.prune_at = (ps.children.len() * 2).max(8);
                }
                ps.children.insert(key(&child), Arc::downgrade(&child));
            }
        }
    }
    (
        Context {
            inner: child.clone(),
        },
        CancelFunc { inner: child },
    )
}

/// Go's cancelCtx.cancel: records `err`, closes `done`, cancels the
/// descendants, stops the timers, and (if `remove_from_parent`) leaves the
/// parent's list. Iterative, unlike Go's recursion: a chain of thousands of
/// derived contexts must not overflow a goroutine's fixed-size stack. Each
/// context's lock is released before its children's are taken, and a
/// child never takes its parent's lock while cancelled by it
/// (`remove_from_parent` is only for the context cancelled first), so
/// locks are only ever taken parent first.
fn cancel(c: &Arc<Inner>, remove_from_parent: bool, err: ContextError) {
    let mut work = Vec::new();
    if !cancel_one(c, err, &mut work) {
        return;
    }
    while let Some(child) = work.pop() {
        cancel_one(&child, err, &mut work);
    }
    if remove_from_parent {
        if let Some(p) = &c.parent {
            if let Some(ps) = &p.state {
                ps.lock().children.remove(&key(c));
            }
        }
    }
}

/// Cancels `c` alone and pushes its live children onto `work`. Returns
/// false if it was already done.
fn cancel_one(c: &Arc<Inner>, err: ContextError, work: &mut Vec<Arc<Inner>>) -> bool {
    let Some(state) = &c.state else { return false };
    let mut st = state.lock();
    if st.err.is_some() {
        return false;
    }
    st.err = Some(err);
    // Closing `done` wakes every goroutine parked on it.
    drop(st.close.take());
    let children = std::mem::take(&mut st.children);
    let timer = st.timer.take();
    drop(st);
    work.extend(children.values().filter_map(Weak::upgrade));
    if let Some(t) = timer {
        t.stop();
    }
    true
}

/// Test hook (not public API): how many children `ctx` lists.
#[doc(hidden)]
pub fn __children(ctx: &Context) -> usize {
    ctx.inner
        .state
        .as_ref()
        .map_or(0, |s| s.lock().children.len())
}
