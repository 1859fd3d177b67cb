//! Synchronisation primitives that park goroutines: Go's `sync` package.
//!
//! [`Mutex`], [`RwLock`], [`WaitGroup`], [`Once`], [`Cond`] and
//! [`Semaphore`] follow the algorithms of Go's sync.Mutex, RWMutex,
//! WaitGroup, Once and Cond (Go 1.19). When they must wait, a goroutine is
//! parked (its P runs other goroutines) and a plain OS thread blocks; both
//! kinds of waiter can contend for the same primitive. All waiting goes
//! through the runtime's semaphore table (sema.rs, Go's sema.go).
//!
//! Differences from `std::sync`: no poisoning (a panic while a lock is held
//! simply unlocks it, as Go has no poisoning); guards may be sent to another
//! goroutine or thread and dropped there (a Go mutex is not tied to the
//! goroutine that locked it); nothing here spins the OS thread for more than
//! a few hundred cycles.
//!
//! Which mutex to use inside goroutines (std, parking_lot or this one) is
//! discussed in docs/SYNC.md.

mod cond;
mod mutex;
mod once;
mod rwlock;
mod semaphore;
mod waitgroup;

pub use cond::Cond;
pub use mutex::{Mutex, MutexGuard};
pub use once::Once;
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::Semaphore;
pub use waitgroup::WaitGroup;
