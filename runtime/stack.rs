//! Goroutine stacks: large lazily-committed arenas, one guard page below
//! every stack, and a cache of free stacks.
//!
//! Go copies stacks to grow them; native Rust frames cannot move, so a goroutine
//! reserves a fixed range up front (default 256 KiB) and the kernel commits
//! pages on first touch: resident memory follows use, virtual reservations are
//! cheap (`MAP_NORESERVE`).
//!
//! The classic design (one mmap + one PROT_NONE guard per stack) costs two VMAs
//! per stack, and Linux's default `vm.max_map_count` of 65,530 then caps a
//! process at ~32k stacks (this is where `may` stops). goro carves stacks out
//! of arenas of [`ARENA_STACKS`] stacks each, one mapping per arena, and installs
//! the guards with `madvise(MADV_GUARD_INSTALL)` (Linux 6.13+), which marks
//! page-table entries instead of splitting the VMA. Where the kernel refuses
//! (older kernels, qemu-user which accepts and ignores the advice), it falls
//! back to `mprotect`, one extra VMA per stack. Which mechanism works is probed
//! once, by checking that the kernel itself faults on a guarded page.
//!
//! Layout of one stack slot (`reserved` bytes):
//!
//! ```text
//!     hi  +----------------+  top of stack: goroutines grow down from here
//!         |   usable       |
//!     lo  +----------------+
//!         |   guard page   |  a touch here is reported as a stack overflow
//!  base   +----------------+
//! ```
//!
//! Stacks of dead goroutines are reused with their G (Go's gfree lists, see
//! sched.rs), one list per *size class* (Go's stackpool orders and
//! stackLarge's log2 buckets play the same part): class 0 holds stacks of
//! the runtime default size (`Config::stack_size`, whatever it is), classes
//! 1.. hold power-of-two reservations from [`MIN_STACK_SIZE`] (64 KiB) to
//! [`MAX_POOLED_STACK_SIZE`] (64 MiB). A `Builder::stack_size` request is
//! rounded up to its class ([`size_class`]; virtual space only: pages are
//! committed on touch), so spawning with a non-default size reuses a G and
//! its stack from the P's list like a default spawn: no lock, no system
//! call. Larger reservations are not pooled: they are rounded up to a
//! power of two too, their stacks go back to the cache below when their G
//! dies (one `MADV_DONTNEED` and one lock each, see [`free`]) and are
//! taken from it again at the next spawn of that power.

use crate::lock_futex::RtMutex as Mutex;
use crate::os;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// Stacks per arena mapping.
pub(crate) const ARENA_STACKS: usize = 256;

/// Bytes at the top of a stack kept resident when its cold pages are
/// released: the first frames of the next goroutine land there again.
pub(crate) const HOT_BYTES: usize = 16 << 10;

/// Smallest stack reservation accepted by [`crate::Config::stack_size`] and
/// [`crate::Builder::stack_size`], in bytes (guard page excluded).
pub const MIN_STACK_SIZE: usize = 64 << 10;

/// Largest stack reservation accepted, in bytes (1 TiB; Go's maximum
/// goroutine stack is 1 GB, which works). Larger sizes, and sizes that
/// overflow when rounded to pages or when the guard page is added, make
/// `spawn` return an `InvalidInput` error instead of mapping anything.
pub const MAX_STACK_SIZE: usize = 1 << 40;

/// Largest arena mapping: stacks of more than `ARENA_MAX_BYTES /
/// ARENA_STACKS` get fewer stacks per arena (at least one), so a 1 GiB
/// stack does not reserve 256 GiB of address space.
const ARENA_MAX_BYTES: usize = 4 << 30;

/// Largest pooled stack reservation, in bytes (64 MiB): a
/// `Builder::stack_size` request up to this (other than the default size)
/// is rounded up to a power of two, and its goroutine takes a dead one's
/// stack of that size from a per-P free list, as default spawns do. A
/// larger request is rounded up to a power of two as well but not pooled:
/// each such spawn and exit takes a global lock, and each exit one
/// `madvise`. (Go keeps
/// free stacks per size too: per-P stackcache orders below 32 KiB, the
/// locked stackLarge buckets above.)
pub const MAX_POOLED_STACK_SIZE: usize = 64 << 20;

/// log2 of [`MIN_STACK_SIZE`]: class 1 is 64 KiB.
const MIN_CLASS_SHIFT: u32 = MIN_STACK_SIZE.trailing_zeros();

/// Size classes of pooled stacks: class 0 is the runtime default size,
/// class `c >= 1` the power of two `MIN_STACK_SIZE << (c - 1)`, up to
/// [`MAX_POOLED_STACK_SIZE`] (12 classes: default, 64 KiB, ..., 64 MiB).
pub(crate) const NCLASS: usize =
    1 + (MAX_POOLED_STACK_SIZE.trailing_zeros() - MIN_CLASS_SHIFT) as usize + 1;

/// The reservation a goroutine gets for a requested `bytes` (already
/// rounded by [`try_round_size`]) and its size class, given the runtime
/// default `default` (page-rounded): the default itself is class 0; other
/// sizes up to [`MAX_POOLED_STACK_SIZE`] round up to their power of two
/// (class >= 1, or 0 if that power is the default); larger ones round up
/// to their power of two too, with class `None` (unpooled: the cache of
/// [`free`] keeps them). Before h46 those stayed exact, and the cache kept
/// a stack of every distinct size ever requested, each reused only by the
/// same size: spawns asking for sizes computed from input grew the address
/// space without bound (30,000 sequential ones: 3.5 TiB reserved, 260 MB
/// of page tables and top pages). Go's large stacks are powers of two too.
pub(crate) fn size_class(bytes: usize, default: usize) -> (Option<usize>, usize) {
    if bytes == default {
        return (Some(0), bytes);
    }
    if bytes > MAX_POOLED_STACK_SIZE {
        // bytes <= MAX_STACK_SIZE (1 TiB, a power of two): no overflow.
        return (None, bytes.next_power_of_two());
    }
    // bytes >= MIN_STACK_SIZE (try_round_size) and <= 64 MiB: no overflow.
    let size = bytes.next_power_of_two();
    if size == default {
        return (Some(0), size);
    }
    let c = (size.trailing_zeros() - MIN_CLASS_SHIFT) as usize + 1;
    (Some(c), size)
}

/// The class a dead G's stack of `size` usable bytes is listed under, or
/// `None` if such stacks are not pooled (they go back to the cache).
#[inline]
pub(crate) fn class_of(size: usize, default: usize) -> Option<usize> {
    if size == default {
        return Some(0);
    }
    if size.is_power_of_two() && (MIN_STACK_SIZE..=MAX_POOLED_STACK_SIZE).contains(&size) {
        return Some((size.trailing_zeros() - MIN_CLASS_SHIFT) as usize + 1);
    }
    None
}

/// Usable bytes of the stacks of power-of-two class `c` (`1..NCLASS`).
pub(crate) const fn class_size(c: usize) -> usize {
    MIN_STACK_SIZE << (c - 1)
}

/// Stacks of at least this many usable bytes (1 MiB) are checked for deep
/// use when their goroutine exits ([`Stack::release_if_deep`]).
const DEEP_CHECK_MIN_SIZE: usize = 1 << 20;

/// Depth below the top (256 KiB, the default stack size) at which a dying
/// goroutine's stack is probed: used that deep, its cold pages are
/// returned to the OS at once.
const DEEP_PROBE_BYTES: usize = 256 << 10;

/// `MADV_GUARD_INSTALL` (Linux 6.13, include/uapi/asm-generic/mman-common.h).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// A goroutine stack: `[lo, hi)` usable, one guard page directly below `lo`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stack {
    /// Lowest usable address (just above the guard page).
    pub(crate) lo: usize,
    /// One past the highest usable address; 16-byte aligned.
    pub(crate) hi: usize,
}

impl Stack {
    /// Usable bytes.
    pub(crate) fn size(&self) -> usize {
        self.hi - self.lo
    }

    /// Returns pages below the hot top to the OS (`MADV_DONTNEED`): they read
    /// as zero again and stop counting as resident. The guard stays installed
    /// (guard markers survive MADV_DONTNEED).
    pub(crate) fn release_cold(&self) {
        self.release_below(HOT_BYTES);
    }

    /// Returns every page of the stack except the top `keep` bytes to the
    /// OS (`MADV_DONTNEED`). The scavenger keeps one page: the next
    /// goroutine's entry frame lands there, and the rest faults in again
    /// only as deep as that goroutine goes.
    pub(crate) fn release_below(&self, keep: usize) {
        let cold_hi = self.hi.saturating_sub(keep);
        if cold_hi > self.lo {
            // SAFETY: [lo, cold_hi) lies inside this stack's mapping and no
            // goroutine runs on it (it is free); DONTNEED on private anonymous
            // memory only drops contents.
            unsafe { libc::madvise(self.lo as *mut _, cold_hi - self.lo, libc::MADV_DONTNEED) };
        }
    }
}

impl Stack {
    /// For a stack whose goroutine has just died: if the goroutine went
    /// deeper than [`DEEP_PROBE_BYTES`] (or an earlier one did and the
    /// pages are still resident), returns the cold pages to the OS now
    /// ([`Stack::release_cold`]).
    ///
    /// Why at exit: a goroutine does not reuse a dead one's stack until it
    /// is spawned, so a program that spawns many goroutines with large
    /// stacks and lets each recurse deep in turn held every deep stack at
    /// once until the scavenger's next pass (up to 1 s): 918 MB against
    /// Go's 44 MB for 100 goroutines of 16 MiB stacks recursing 100,000
    /// frames at GOMAXPROCS=1 (Go frees a dead goroutine's grown stack and
    /// the next one reuses the memory).
    ///
    /// How deep use is seen without a system call: pages below the hot top
    /// read as zero until a frame writes them (fresh mappings and released
    /// pages alike), and any frame that deep leaves a return address or
    /// saved register behind, so one page at that depth is scanned for a
    /// non-zero word. An untouched page maps the shared zero page on first
    /// read (one minor fault per stack, then a cached read); a deep frame
    /// that left only zeros in that page is missed and left to the
    /// scavenger. Only for stacks of at least [`DEEP_CHECK_MIN_SIZE`]: the
    /// default 256 KiB stacks are not probed (a spawn-heavy program would
    /// pay the first-read fault per stack, and such a stack holds at most
    /// 256 KiB).
    #[inline]
    pub(crate) fn release_if_deep(&self) {
        if self.size() >= DEEP_CHECK_MIN_SIZE {
            self.release_if_deep_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn release_if_deep_slow(&self) {
        let page = os::page_size();
        let probe = (self.hi - DEEP_PROBE_BYTES) & !(page - 1);
        // SAFETY: [probe, probe + page) lies inside [lo, hi) (size >= 1
        // MiB > DEEP_PROBE_BYTES + page), mapped readable and writable; the
        // goroutine that used this stack is dead, so nothing writes it
        // while we read.
        let words = unsafe { core::slice::from_raw_parts(probe as *const u64, page / 8) };
        if words.iter().any(|&w| w != 0) {
            self.release_cold();
        }
    }

    /// Releases the dead part of a parked goroutine's stack (the stack
    /// shrinker, shrink.rs): every whole page below `sp - slack`, from `lo`
    /// up, if that is at least `min` bytes. Never the guard page (below
    /// `lo`) nor the page holding `sp`'s frame (`slack` >= one page is
    /// the caller's choice; the range ends at or below `sp - slack`).
    /// Returns the bytes released (0 if nothing was: too little, or `sp`
    /// is not inside this stack, which is then left alone).
    ///
    /// # Safety
    /// `sp` is the saved stack pointer of a context suspended on this
    /// stack, and for the whole call nothing runs on the stack nor reads
    /// or writes it below `sp - slack` (the G is held Waiting under the
    /// scan bit; see shrink.rs). Pages released read as zero afterwards.
    pub(crate) unsafe fn release_dead(&self, sp: usize, slack: usize, min: usize) -> usize {
        let page = os::page_size();
        if sp <= self.lo || sp > self.hi {
            return 0;
        }
        let Some(top) = sp.checked_sub(slack) else {
            return 0;
        };
        let hi = top & !(page - 1);
        if hi < self.lo || hi - self.lo < min {
            return 0;
        }
        // SAFETY: [lo, hi) lies inside this stack's usable range (lo is
        // page-aligned, just above the guard page; hi <= sp - slack < sp <=
        // self.hi), and by the caller's contract no code uses it now;
        // DONTNEED on private anonymous memory only drops contents (the
        // pages fault back in zeroed), and guard markers below lo are not
        // in the range.
        let r = unsafe { libc::madvise(self.lo as *mut _, hi - self.lo, libc::MADV_DONTNEED) };
        if r == 0 {
            hi - self.lo
        } else {
            0
        }
    }
}

/// How guard pages are installed; probed once.
const GUARD_UNKNOWN: u8 = 0;
const GUARD_MADVISE: u8 = 1;
const GUARD_MPROTECT: u8 = 2;
/// Relaxed: every thread computes the same mode; a race only repeats the
/// probe.
static GUARD_MODE: AtomicU8 = AtomicU8::new(GUARD_UNKNOWN);

/// Number of stacks ever reserved (counter for `Stats::stacks_reserved`;
/// Relaxed, statistics only).
pub(crate) static STACKS_RESERVED: AtomicUsize = AtomicUsize::new(0);

/// Number of [`free`] calls: stacks returned to the cache, each costing
/// one `MADV_DONTNEED` and one lock of [`POOL`] (test hook
/// `goro::__private::stack_frees`; pooled sizes never get here). Relaxed:
/// a counter.
pub(crate) static STACK_FREES: AtomicUsize = AtomicUsize::new(0);

/// An arena being carved: the next free slot and the arena's end.
struct Arena {
    next: usize,
    end: usize,
}

/// Per slot size: the arena being carved and the free stacks.
struct Class {
    slot: usize,
    /// Batches carved so far (see `alloc`).
    batches: usize,
    arena: Option<Arena>,
    free: Vec<Stack>,
}

/// Arenas and free stacks, keyed by slot size (few distinct sizes in practice).
static POOL: Mutex<Vec<Class>> = Mutex::new(Vec::new());

/// Registered arenas `(base, end, slot)`, for the fault handler to map a guard
/// address back to a stack. Append-only; read without locks from the signal
/// handler, so it is a fixed array of atomics. Arenas past the first
/// `MAX_ARENAS` (65,536 goroutines with unpooled stacks reach that) are
/// not registered; an overflow there is recognised by the handler's
/// fallback, the running goroutine's own guard page
/// (`signal_unix::running_guard_hit`).
const MAX_ARENAS: usize = 1 << 16;
/// The entries are Relaxed: `new_arena`'s Release store of NARENAS
/// publishes them to `guard_hit`'s Acquire load; appends are serialised by
/// POOL (NARENAS's own Relaxed load there).
static ARENA_BASE: [AtomicUsize; MAX_ARENAS] = [const { AtomicUsize::new(0) }; MAX_ARENAS];
static ARENA_END: [AtomicUsize; MAX_ARENAS] = [const { AtomicUsize::new(0) }; MAX_ARENAS];
static ARENA_SLOT: [AtomicUsize; MAX_ARENAS] = [const { AtomicUsize::new(0) }; MAX_ARENAS];
static NARENAS: AtomicUsize = AtomicUsize::new(0);

/// Rounds a requested usable size to whole pages (at least
/// MIN_STACK_SIZE). Errors (`InvalidInput`) above [`MAX_STACK_SIZE`], so the
/// rounding, the guard page and the arena size cannot overflow.
pub(crate) fn try_round_size(bytes: usize) -> std::io::Result<usize> {
    if bytes > MAX_STACK_SIZE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "goro: stack size {bytes} bytes is larger than the maximum {MAX_STACK_SIZE} (1 TiB)"
            ),
        ));
    }
    let page = os::page_size();
    let b = bytes.max(MIN_STACK_SIZE);
    // Cannot overflow: b <= 1 TiB.
    Ok((b + page - 1) & !(page - 1))
}

/// [`try_round_size`] for a size already checked (a validated
/// [`crate::Config`]); an impossible size saturates to the maximum.
pub(crate) fn round_size(bytes: usize) -> usize {
    try_round_size(bytes.min(MAX_STACK_SIZE)).unwrap_or(MAX_STACK_SIZE)
}

/// Stack allocations still to fail with ENOMEM (test hook
/// `__private::fail_stack_allocs`).
pub(crate) static FAIL_ALLOCS: core::sync::atomic::AtomicI64 =
    core::sync::atomic::AtomicI64::new(0);

/// Allocates a stack with `size` usable bytes (already rounded by
/// [`round_size`]). Errors with the OS error when address space or mappings
/// run out. Any context with no runtime lock held.
pub(crate) fn alloc(size: usize) -> std::io::Result<Stack> {
    // Test knob: fail as an exhausted address space does. Relaxed: a
    // counter only tests set.
    if FAIL_ALLOCS.load(Ordering::Relaxed) > 0 && FAIL_ALLOCS.fetch_sub(1, Ordering::Relaxed) > 0 {
        return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
    }
    let page = os::page_size();
    let slot = size + page;
    let mut pool = POOL.lock();
    let idx = match pool.iter().position(|c| c.slot == slot) {
        Some(i) => i,
        None => {
            pool.push(Class {
                slot,
                batches: 0,
                arena: None,
                free: Vec::new(),
            });
            pool.len() - 1
        }
    };
    let class = &mut pool[idx];
    if let Some(s) = class.free.pop() {
        return Ok(s);
    }
    let need_arena = match &class.arena {
        Some(a) => a.next + slot > a.end,
        None => true,
    };
    if need_arena {
        class.arena = Some(new_arena(slot)?);
    }
    let a = class.arena.as_mut().expect("arena present");
    // Carve a batch: its guards (and its stacks' top pages) then cost one
    // system call each instead of one per stack plus one page fault.
    let n = ((a.end - a.next) / slot)
        .min(CARVE_BATCH_BYTES / slot)
        .clamp(1, CARVE_BATCH);
    let base = a.next;
    a.next += n * slot;
    // Commit top pages ahead only for a class that has needed a batch
    // before: a program with a few goroutines keeps its RSS.
    let populate = class.batches > 0;
    class.batches += 1;
    drop(pool);
    let n = prepare_fresh(base, slot, n, page, populate)?;
    STACKS_RESERVED.fetch_add(n, Ordering::Relaxed); // statistics only
    let stack = |i: usize| Stack {
        lo: base + i * slot + page,
        hi: base + (i + 1) * slot,
    };
    if n > 1 {
        let mut pool = POOL.lock();
        let class = pool
            .iter_mut()
            .find(|c| c.slot == slot)
            .expect("class present");
        // Highest first, so pops take the lowest addresses first.
        class.free.extend((1..n).rev().map(stack));
    }
    Ok(stack(0))
}

/// Most slots carved from an arena at a time when a class's free list is
/// empty: 32 stacks of the default 256 KiB are 8 MiB, 4 page-table pages,
/// and their populated top pages 128 KiB of memory committed ahead.
const CARVE_BATCH: usize = 32;

/// Most address space a batch spans (bigger stacks come fewer at a time,
/// so their guards need no more page-table pages than the default's).
const CARVE_BATCH_BYTES: usize = 8 << 20;

/// `PIDFD_SELF` (Linux 6.15, include/uapi/linux/pidfd.h): the calling
/// process for pidfd system calls, with no descriptor to open or inherit.
const PIDFD_SELF: libc::c_int = -10000;

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault pages in writable, now.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Whether `process_madvise(PIDFD_SELF, ..)` with guard advice works here
/// (Linux 6.15+; not under qemu-user). Cleared at the first failure
/// (Relaxed: a stale true costs one more failed call, then the per-slot
/// path).
static BATCH_MADVISE: AtomicBool = AtomicBool::new(true);

/// Guards `n` fresh slots from `base` (the guard page at the bottom of
/// each) and, if `populate`, faults in each stack's top page, where its
/// first frame goes.
/// Batched with `process_madvise` where the kernel has it: one call for
/// all guards, one for all top pages. Returns how many slots are usable
/// (all `n`, or fewer if a per-slot guard failed after the first; the
/// rest of the batch is then abandoned, address space only). Errors: the
/// first slot's guard could not be installed.
fn prepare_fresh(
    base: usize,
    slot: usize,
    n: usize,
    page: usize,
    populate: bool,
) -> std::io::Result<usize> {
    if guard_mode() == GUARD_MADVISE && n > 1 && BATCH_MADVISE.load(Ordering::Relaxed) {
        let iov = |off: usize| {
            (0..n)
                .map(|i| libc::iovec {
                    iov_base: (base + i * slot + off) as *mut libc::c_void,
                    iov_len: page,
                })
                .collect::<Vec<_>>()
        };
        let guards = iov(0);
        // SAFETY: every iovec names one whole page inside our arena, not
        // in use by anything; MADV_GUARD_INSTALL only marks those pages.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF,
                guards.as_ptr(),
                n,
                MADV_GUARD_INSTALL,
                0,
            )
        };
        if r == (n * page) as libc::c_long {
            if !populate {
                return Ok(n);
            }
            let tops = iov(slot - page);
            // A hint: a failure leaves the pages to fault in on first use.
            // SAFETY: each iovec is the top page of a fresh stack in our
            // arena, private anonymous memory nobody uses yet; populating
            // only commits zero pages.
            unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    PIDFD_SELF,
                    tops.as_ptr(),
                    n,
                    MADV_POPULATE_WRITE,
                    0,
                )
            };
            return Ok(n);
        }
        // A partial result guarded a prefix; installing again is harmless.
        BATCH_MADVISE.store(false, Ordering::Relaxed);
    }
    for i in 0..n {
        if let Err(e) = install_guard(base + i * slot, page) {
            if i == 0 {
                return Err(e);
            }
            return Ok(i);
        }
    }
    Ok(n)
}

/// Returns a stack to the cache, releasing its cold pages first. The slow
/// path: used for stacks of unpooled sizes (above
/// [`MAX_POOLED_STACK_SIZE`]) when their G dies, and for a G's stack that
/// does not fit the spawn that took the G.
pub(crate) fn free(s: Stack) {
    STACK_FREES.fetch_add(1, Ordering::Relaxed); // statistics only
    s.release_cold();
    let slot = s.size() + os::page_size();
    let mut pool = POOL.lock();
    if let Some(c) = pool.iter_mut().find(|c| c.slot == slot) {
        c.free.push(s);
    }
}

fn new_arena(slot: usize) -> std::io::Result<Arena> {
    // slot <= MAX_STACK_SIZE + page (round_size), so this cannot overflow.
    // Unpooled sizes (above MAX_POOLED_STACK_SIZE) get one stack per
    // arena: every distinct size is its own class, and a multi-GiB
    // reservation per size would exhaust an address-space limit.
    let mut count = if slot > MAX_POOLED_STACK_SIZE + os::page_size() {
        1
    } else {
        (ARENA_MAX_BYTES / slot).clamp(1, ARENA_STACKS)
    };
    // Under an address-space limit (RLIMIT_AS) a full arena may not fit
    // where its first stack would (an 8 MiB run stack's arena is 2 GiB):
    // fall back to one carve batch (8 MiB, at least one stack), not to the
    // largest arena that fits, which would leave nothing for the other
    // size classes; then to one stack, before reporting the error.
    let (p, len) = loop {
        let len = slot * count;
        // SAFETY: anonymous private mapping at a kernel-chosen address; no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            break (p, len);
        }
        let e = crate::os::last_os_error();
        if count == 1 || e.raw_os_error() != Some(libc::ENOMEM) {
            return Err(e);
        }
        let batch = (CARVE_BATCH_BYTES / slot).clamp(1, CARVE_BATCH);
        count = if count > batch { batch } else { 1 };
    };
    let base = p as usize;
    let i = NARENAS.load(Ordering::Relaxed);
    if i < MAX_ARENAS {
        // Release on NARENAS publishes the three entries to the signal
        // handler's Acquire load; only alloc (under POOL) appends.
        ARENA_BASE[i].store(base, Ordering::Relaxed);
        ARENA_END[i].store(base + len, Ordering::Relaxed);
        ARENA_SLOT[i].store(slot, Ordering::Relaxed);
        NARENAS.store(i + 1, Ordering::Release);
    }
    Ok(Arena {
        next: base,
        end: base + len,
    })
}

/// How guard pages are installed here (probed at the first call).
fn guard_mode() -> u8 {
    // Relaxed: every thread computes the same mode; a race only repeats the probe.
    let mut mode = GUARD_MODE.load(Ordering::Relaxed);
    if mode == GUARD_UNKNOWN {
        mode = probe_guard_mode();
        GUARD_MODE.store(mode, Ordering::Relaxed);
    }
    mode
}

fn install_guard(addr: usize, page: usize) -> std::io::Result<()> {
    if guard_mode() == GUARD_MADVISE {
        // SAFETY: addr is a page inside one of our arenas, not in use.
        let r = unsafe { libc::madvise(addr as *mut _, page, MADV_GUARD_INSTALL) };
        if r == 0 {
            return Ok(());
        }
    }
    // SAFETY: as above; PROT_NONE makes the page fault on any access.
    let r = unsafe { libc::mprotect(addr as *mut _, page, libc::PROT_NONE) };
    if r != 0 {
        return Err(crate::os::last_os_error());
    }
    Ok(())
}

/// Checks that MADV_GUARD_INSTALL really guards: the kernel must refuse to
/// read a guarded page (write(2) from it fails with EFAULT). qemu-user
/// returns success for advice it does not know, so success alone proves
/// nothing.
fn probe_guard_mode() -> u8 {
    let page = os::page_size();
    // SAFETY: a fresh private mapping, unmapped below.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return GUARD_MPROTECT;
    }
    let mut mode = GUARD_MPROTECT;
    // SAFETY: p is our own page.
    if unsafe { libc::madvise(p, page, MADV_GUARD_INSTALL) } == 0 {
        let mut fds = [0i32; 2];
        // SAFETY: fds is a valid out-array of two ints. CLOEXEC: a child
        // another thread spawns meanwhile must not inherit the pair.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
            // SAFETY: the kernel validates the buffer and returns EFAULT
            // instead of faulting the process.
            let n = unsafe { libc::write(fds[1], p, 1) };
            if n < 0 && crate::os::last_os_error().raw_os_error() == Some(libc::EFAULT) {
                mode = GUARD_MADVISE;
            }
            // SAFETY: closing the pipe we opened.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
        }
    }
    // SAFETY: unmapping our own probe page.
    unsafe { libc::munmap(p, page) };
    mode
}

/// Whether guard pages are installed with MADV_GUARD_INSTALL (one VMA per
/// arena) rather than mprotect (one extra VMA per stack).
pub fn guards_use_madvise() -> bool {
    if GUARD_MODE.load(Ordering::Relaxed) == GUARD_UNKNOWN {
        GUARD_MODE.store(probe_guard_mode(), Ordering::Relaxed);
    }
    GUARD_MODE.load(Ordering::Relaxed) == GUARD_MADVISE
}

/// If `addr` is inside a stack guard page, returns that stack's
/// `(lo, usable size)`. Async-signal-safe: atomics only.
pub(crate) fn guard_hit(addr: usize) -> Option<(usize, usize)> {
    let page = os::page_size();
    // Acquire pairs with the Release in new_arena.
    let n = NARENAS.load(Ordering::Acquire).min(MAX_ARENAS);
    for i in 0..n {
        let base = ARENA_BASE[i].load(Ordering::Relaxed);
        let end = ARENA_END[i].load(Ordering::Relaxed);
        if addr >= base && addr < end {
            let slot = ARENA_SLOT[i].load(Ordering::Relaxed);
            let off = (addr - base) % slot;
            if off < page {
                let slot_base = addr - off;
                return Some((slot_base + page, slot - page));
            }
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1 << 10;

    /// Requests map to the class whose power of two covers them, the
    /// default size (power of two or not) to class 0, sizes above the
    /// pooled bound to no class; a stack of the size a request got is
    /// listed under the class the request asked for (gfput and gfget agree).
    #[test]
    fn size_classes() {
        for default in [256 * KIB, 300 * KIB, 8 << 20] {
            let default = round_size(default);
            assert_eq!(size_class(default, default), (Some(0), default));
            let mut last = 0;
            let mut req = MIN_STACK_SIZE;
            while req <= 2 * MAX_POOLED_STACK_SIZE {
                let (c, size) = size_class(round_size(req), default);
                assert!(size >= req, "{req}: rounded down to {size}");
                assert_eq!(class_of(size, default), c, "request {req}");
                match c {
                    Some(0) => assert!(size == default),
                    Some(c) => {
                        assert!(c < NCLASS, "{req}: class {c}");
                        assert_eq!(class_size(c), size);
                        assert!(size < 2 * req, "{req}: {size} more than doubles it");
                    }
                    None => {
                        assert!(req > MAX_POOLED_STACK_SIZE);
                        assert_eq!(size, round_size(req).next_power_of_two());
                        assert!(size < 2 * req, "{req}: {size} more than doubles it");
                    }
                }
                assert!(size >= last, "{req}: {size} below a smaller request's");
                last = size;
                req += req / 3 + 4096;
            }
        }
        let d = 256 * KIB;
        assert_eq!(size_class(64 * KIB, d), (Some(1), 64 * KIB));
        assert_eq!(size_class(65 * KIB, d), (Some(2), 128 * KIB));
        assert_eq!(size_class(200 * KIB, d), (Some(0), 256 * KIB));
        assert_eq!(size_class(300 * KIB, d), (Some(4), 512 * KIB));
        assert_eq!(size_class(8 << 20, d), (Some(8), 8 << 20));
        assert_eq!(size_class(64 << 20, d), (Some(NCLASS - 1), 64 << 20));
        assert_eq!(size_class((64 << 20) + 4096, d), (None, 128 << 20));
        assert_eq!(size_class(MAX_STACK_SIZE, d), (None, MAX_STACK_SIZE));
        // A default that is not a power of two has its own class; the
        // power of two it would fall in stays a class of its own.
        let d = round_size(300 * KIB);
        assert_eq!(size_class(256 * KIB, d), (Some(3), 256 * KIB));
        assert_eq!(class_of(512 * KIB, d), Some(4));
        assert_eq!(class_of(1 << 30, d), None);
    }
}
