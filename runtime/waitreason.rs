//! Why a goroutine is parked: Go's `waitReason` (runtime2.go), with Go's
//! strings, recorded by every `gopark` for the goroutine dump and the
//! deadlock report.

use core::sync::atomic::{AtomicI64, Ordering};

/// `nanotime()` as of sysmon's last tick (sysmon sleeps at most 10 ms), so
/// gopark can stamp `g.waitsince` with a load and a store instead of a
/// clock read (the park path is hot: a vDSO clock read measured 11–28 ns
/// here). Relaxed: a lone, approximate value; stale by at most one tick.
static PARK_CLOCK: AtomicI64 = AtomicI64::new(0);

/// The approximate current time for gopark's waitsince stamp.
#[inline]
pub(crate) fn park_clock() -> i64 {
    PARK_CLOCK.load(Ordering::Relaxed)
}

/// Called by sysmon each tick (and at start) with `nanotime()`. Stored
/// even: bit 0 of a `waitsince` stamp is the stack shrinker's "this park
/// is handled" mark (shrink::HANDLED), which gopark's stamp thus clears.
#[inline]
pub(crate) fn set_park_clock(now: i64) {
    PARK_CLOCK.store(now & !crate::shrink::HANDLED, Ordering::Relaxed);
}

/// Go's waitReason. The discriminant is what `G::waitreason` stores; the
/// string is exactly Go's (`waitReasonStrings` in runtime2.go), except
/// [`WaitReason::Join`], which has no Go counterpart (Go joins through a
/// channel or a WaitGroup) and prints as the channel receive it stands for.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitReason {
    /// Not parked (or parked by a path that gave no reason).
    Zero = 0,
    /// `Receiver::recv` / `Sender`-less receive (Go's waitReasonChanReceive).
    ChanReceive = 1,
    /// `Sender::send` (waitReasonChanSend).
    ChanSend = 2,
    /// `select!` and the timed channel operations built on it.
    Select = 3,
    /// A `select!` with no cases, or a bare forever-park.
    SelectNoCases = 4,
    /// `goro::time::sleep`.
    Sleep = 5,
    /// `goro::sync::Mutex::lock`.
    SyncMutexLock = 6,
    /// `goro::sync::RwLock::read`.
    SyncRWMutexRLock = 7,
    /// `goro::sync::RwLock::write`.
    SyncRWMutexLock = 8,
    /// `goro::sync::WaitGroup::wait`.
    SyncWaitGroupWait = 9,
    /// `goro::sync::Cond::wait`.
    SyncCondWait = 10,
    /// `goro::sync::Semaphore::acquire` and other raw semaphore waits.
    Semacquire = 11,
    /// Waiting for a file descriptor (netpoll). Counted as wakeable by the
    /// deadlock detector.
    IoWait = 12,
    /// `JoinHandle::join` in a goroutine (goro-specific; printed as Go's
    /// `chan receive`, the way Go code waits for a goroutine).
    Join = 13,
    /// `goro::block_on` waiting for a Future's waker.
    FutureWait = 14,
}

impl WaitReason {
    /// Go's string for this reason ("" for [`WaitReason::Zero`]).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WaitReason::Zero => "",
            WaitReason::ChanReceive => "chan receive",
            WaitReason::ChanSend => "chan send",
            WaitReason::Select => "select",
            WaitReason::SelectNoCases => "select (no cases)",
            WaitReason::Sleep => "sleep",
            WaitReason::SyncMutexLock => "sync.Mutex.Lock",
            WaitReason::SyncRWMutexRLock => "sync.RWMutex.RLock",
            WaitReason::SyncRWMutexLock => "sync.RWMutex.Lock",
            WaitReason::SyncWaitGroupWait => "sync.WaitGroup.Wait",
            WaitReason::SyncCondWait => "sync.Cond.Wait",
            WaitReason::Semacquire => "semacquire",
            WaitReason::IoWait => "IO wait",
            WaitReason::Join => "chan receive",
            // No Go counterpart; named like Go's other waits.
            WaitReason::FutureWait => "future wait",
        }
    }

    /// Inverse of `as u8` (unknown values read as Zero).
    pub(crate) fn from_u8(v: u8) -> WaitReason {
        use WaitReason::*;
        const ALL: [WaitReason; 15] = [
            Zero,
            ChanReceive,
            ChanSend,
            Select,
            SelectNoCases,
            Sleep,
            SyncMutexLock,
            SyncRWMutexRLock,
            SyncRWMutexLock,
            SyncWaitGroupWait,
            SyncCondWait,
            Semacquire,
            IoWait,
            Join,
            FutureWait,
        ];
        ALL.get(v as usize).copied().unwrap_or(Zero)
    }
}
