//! Goroutine creation and completion: newproc, the entry function,
//! `JoinHandle` and `Builder`. Go's newproc/newproc1/goexit (proc.go).

use crate::g::{GStatus, G};
use crate::park::{self, Parker};
use crate::sched::{self, SCHED};
use crate::stack;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Closures larger than this are boxed instead of copied to the stack top.
const MAX_INLINE_CLOSURE: usize = 1024;

/// The first Rust frame of every goroutine: moves the closure off the
/// stack top, runs it, and exits through goexit.
unsafe extern "C" fn goentry<F: FnOnce()>(arg: *mut u8) -> ! {
    // SAFETY: newproc wrote an F at arg and nobody else reads it.
    let f = unsafe { ptr::read(arg.cast::<F>()) };
    f();
    park::goexit()
}

/// Go's newproc: create a goroutine running `f` (which must not unwind:
/// the wrappers below catch panics) and make it runnable. `stack_size` in
/// bytes (None: the runtime default). Errors: the stack could not be mapped.
pub(crate) fn newproc<F: FnOnce() + Send + 'static>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<u64> {
    if core::mem::size_of::<F>() > MAX_INLINE_CLOSURE || core::mem::align_of::<F>() > 64 {
        let b: Box<dyn FnOnce() + Send> = Box::new(f);
        return newproc_placed(b, stack_size, name);
    }
    newproc_placed(f, stack_size, name)
}

fn newproc_placed<F: FnOnce() + Send + 'static>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<u64> {
    crate::ensure_started();
    park::preempt_check();
    // Relaxed: set once before the runtime starts (see sched::start).
    let default = SCHED.stack_size.load(Ordering::Relaxed);
    // An impossible size is the caller's error: reject it before taking a
    // G or mapping anything. A pooled size takes a G of its class, whose
    // stack fits; an unpooled one takes a default-class G and swaps its
    // stack below (the slow path).
    let (class, want) = match stack_size {
        Some(s) => match stack::size_class(stack::try_round_size(s)?, default) {
            (Some(c), size) => (c, size),
            (None, size) => (0, size),
        },
        None => (0, default),
    };
    // The P stays ours until the new G is queued.
    let (mp, pp) = park::acquirem_p();
    let _ml = crate::m::MLock::of(mp);
    // SAFETY: the P is held by this M, and stays so in the section.
    let p = unsafe { pp.as_ref() };
    let mut gp = match p {
        Some(p) => sched::gfget(p, class),
        None => sched::gfget_global(class),
    };
    if gp.is_null() {
        gp = G::alloc(None);
        // SAFETY: fresh G, ours.
        unsafe { (*gp).cas_status(GStatus::Idle, GStatus::Dead) };
    }
    // SAFETY: gp is Dead and ours (fresh or from a free list).
    let g = unsafe { &*gp };
    let st = match g.stack.get() {
        Some(s) if s.size() == want => s,
        other => {
            if let Some(s) = other {
                stack::free(s);
                g.stack.set(None);
            }
            match stack::alloc(want) {
                Ok(s) => s,
                Err(e) => {
                    // Keep the G for reuse; report the exhaustion. From a
                    // plain thread there is no P free list to return it
                    // to: the dead, stackless G is left unlisted (Gs are
                    // never freed anyway; one per failed spawn, an error
                    // path).
                    if let Some(p) = p {
                        sched::gfput(p, gp);
                    }
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot allocate a {} KiB goroutine stack: {e}", want >> 10),
                    ));
                }
            }
        }
    };
    g.stack.set(Some(st));
    // Put the closure at the top of the stack and the first frame below it.
    let size = core::mem::size_of::<F>();
    let align = core::mem::align_of::<F>().max(16);
    let fptr = (st.hi - size) & !(align - 1);
    // SAFETY: [fptr, hi) is inside the stack, which no one runs on (the G is
    // Dead); fptr is aligned for F.
    unsafe { ptr::write(fptr as *mut F, f) };
    // SAFETY: fptr is 16-byte aligned with the whole stack below it.
    let sp = unsafe { crate::arch::init_frame(fptr, goentry::<F>, fptr as *mut u8) };
    // SAFETY: the G is ours until it is queued below.
    unsafe { (*g.gobuf()).sp = sp };
    // A fresh TSan fiber (none without cfg(goro_tsan)), created here so
    // that everything above, the closure on the stack included, happens
    // before the goroutine runs (arch/fiber_tsan.rs). goexit0 destroyed
    // the previous goroutine's.
    g.fiber.set(crate::arch::Fiber::create());
    let goid = sched::next_goid(p);
    g.goid.set(goid);
    if crate::trace::on() {
        crate::trace::spawn(goid);
    }
    // A dead G's name is None (goexit0 took it): only a name to set is
    // written, under NAMES, as a racing dump may read it (see NAMES).
    if name.is_some() {
        let _names = crate::g::NAMES.lock();
        // SAFETY: the G is ours until queued below; dump reads the field
        // only under NAMES, which we hold.
        unsafe { *g.name.get() = name };
    }
    // Relaxed: the G is ours; the status CAS below publishes it.
    g.param.store(0, Ordering::Relaxed);
    match p {
        Some(p) => p.ngoroutines_add(1),
        // Relaxed: statistics only (see `sched::gcount`).
        None => drop(SCHED.ngoroutines.fetch_add(1, Ordering::Relaxed)),
    }
    g.cas_status(GStatus::Dead, GStatus::Runnable);
    match p {
        Some(p) => {
            sched::runqput(p, gp, true);
            sched::wakep();
        }
        None => sched::globrunqput_and_wake(gp),
    }
    Ok(goid)
}

// ---------------------------------------------------------------------------
// Panic reports.

/// Installs, once per process (when the runtime starts), a panic hook in
/// place of std's default one: a panic on a goroutine is reported as std
/// reports one on a thread, but naming the goroutine — `goroutine 42
/// "worker-7" panicked at src/main.rs:3:5:` then the message (std would
/// say `thread '<unnamed>'`, the M's name); any other panic goes to std's
/// default hook. A hook the program set before (a logger, an error
/// reporter, a quiet test hook) is left alone and sees every panic,
/// goroutines' included, as it would without goro; one set later replaces
/// goro's, as `set_hook` always does. Either way, the program's hook wins.
/// (libtest installs one while it captures a test's output, so under
/// `cargo test` a goroutine's panic is reported as std reports a thread's.)
///
/// On a thread that is unwinding a panic (goro first used from a
/// destructor) std forbids touching the hook: the install is left to the
/// next call from a thread that is not (every spawn calls this, also
/// spawns from goroutines, on Ms). Before h40 `take_hook` panicked
/// there, which aborted the process ("panic in a destructor during
/// cleanup").
pub(crate) fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if ONCE.is_completed() || std::thread::panicking() {
        return;
    }
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        // take_hook leaves std's default hook installed, so a second take
        // returns a box of it: the same zero-sized function item behind the
        // same vtable, made by the same code in std, as `prev` when no hook
        // was set. A hook of the program's differs in its vtable (a
        // different type); were std ever to duplicate the vtable, the
        // default would be taken for a program's hook and goroutine panics
        // would read `thread '<name>'`: a plainer report, nothing lost.
        let default = std::panic::take_hook();
        #[allow(ambiguous_wide_pointer_comparisons)]
        let prev_is_default = std::ptr::eq(&*prev, &*default);
        drop(default);
        if !prev_is_default {
            std::panic::set_hook(prev);
            return;
        }
        std::panic::set_hook(Box::new(move |info| match crate::current_id() {
            Some(id) => report_goroutine_panic(id, info.payload(), info.location()),
            None => prev(info),
        }));
    });
}

/// Prints a goroutine's panic like std's default hook (message, location,
/// backtrace per RUST_BACKTRACE, the backtrace note once per process).
fn report_goroutine_panic(
    id: u64,
    payload: &(dyn std::any::Any + Send),
    loc: Option<&std::panic::Location<'_>>,
) {
    use std::io::Write;
    use std::sync::atomic::AtomicBool;
    static NOTE_PRINTED: AtomicBool = AtomicBool::new(false);
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "Box<dyn Any>"
    };
    let gp = crate::m::getg();
    // SAFETY: the running G of this thread (current_id was Some), never
    // freed; only the G itself (or newproc, while it is dead) writes its
    // name, so the read cannot race.
    let name = unsafe { (*(*gp).name.get()).clone() };
    let mut out = String::new();
    out.push_str(&format!("goroutine {id}"));
    if let Some(n) = name {
        out.push_str(&format!(" {n:?}"));
    }
    out.push_str(" panicked");
    if let Some(l) = loc {
        out.push_str(&format!(" at {}:{}:{}", l.file(), l.line(), l.column()));
    }
    out.push_str(&format!(":\n{msg}\n"));
    static REFCELL_NOTE_PRINTED: AtomicBool = AtomicBool::new(false);
    if (msg.starts_with("RefCell already") || msg.starts_with("already borrowed"))
        // Relaxed: a once-only flag, as NOTE_PRINTED.
        && !REFCELL_NOTE_PRINTED.swap(true, Ordering::Relaxed)
    {
        // std's RefCell messages ("RefCell already borrowed", "RefCell
        // already mutably borrowed", older "already borrowed: ..."). In a
        // goroutine the usual cause is a thread_local! borrow held across
        // a switch point, which std's bare message does not suggest (h14).
        out.push_str(
            "note: a goroutine may resume on another OS thread after a channel operation, \
             sleep, yield, lock or goro::net call; a `thread_local!` RefCell (or std's \
             stdout lock) borrowed across one is shared with whatever else runs on that \
             thread. Use `goro::goroutine_local!` for per-goroutine state.\n",
        );
    }
    let bt = std::backtrace::Backtrace::capture();
    let captured = bt.status() == std::backtrace::BacktraceStatus::Captured;
    if bt.status() == std::backtrace::BacktraceStatus::Disabled
        // Relaxed: a once-only flag; a race prints the note twice at most.
        && !NOTE_PRINTED.swap(true, Ordering::Relaxed)
    {
        out.push_str(
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
        );
    }
    // Under one lock, so reports of concurrent panics do not interleave.
    // The message goes out before the backtrace is symbolised (formatting
    // it resolves symbols: 100 ms and more under qemu), so a process that
    // ends meanwhile still shows what panicked (h15: the whole report was
    // lost when main returned first).
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(out.as_bytes());
    if captured {
        let _ = write!(err, "stack backtrace:\n{bt}\n");
    }
}

// ---------------------------------------------------------------------------
// Join.

const PENDING: usize = 0;
const DONE: usize = 1;

/// Result slot shared by a goroutine and its JoinHandle. `state` is
/// PENDING, DONE, or a pointer to the joiner's `Waiter` (parked). Owned
/// by two [`PacketRef`]s (the goroutine's and the handle's); `refs`
/// counts them, as an `Arc`'s strong count would.
struct Packet<T> {
    /// Arc's protocol: Release decrements, an Acquire fence in the last.
    refs: AtomicUsize,
    /// `complete`'s AcqRel swap to DONE (Release: the result) pairs with
    /// the joiner's Acquire loads and its AcqRel CAS that publishes the
    /// waiter (Acquire on failure: DONE came first).
    state: AtomicUsize,
    result: UnsafeCell<Option<std::thread::Result<T>>>,
}

// SAFETY: `result` is written once by the goroutine before the Release swap
// to DONE and read by the joiner after an Acquire load of DONE.
unsafe impl<T: Send> Sync for Packet<T> {}

/// A parked joiner: a goroutine or a thread.
struct Waiter {
    g: *mut G,
    parker: Parker,
}

impl<T> Packet<T> {
    /// Goroutine side: publish the result and wake the joiner if parked.
    fn complete(&self, r: std::thread::Result<T>) {
        // SAFETY: only the goroutine writes, before publishing DONE.
        unsafe { *self.result.get() = Some(r) };
        // AcqRel: Release publishes the result; Acquire sees the waiter.
        let prev = self.state.swap(DONE, Ordering::AcqRel);
        if prev != PENDING && prev != DONE {
            let w = prev as *const Waiter;
            // SAFETY: the joiner's Waiter stays live until it is woken.
            unsafe {
                if (*w).g.is_null() {
                    (*w).parker.unpark(0);
                } else {
                    park::goready((*w).g);
                }
            }
        }
    }

    fn take(&self) -> std::thread::Result<T> {
        // SAFETY: state is DONE (Acquire-loaded by the caller): the writer is done.
        match unsafe { (*self.result.get()).take() } {
            Some(r) => r,
            None => crate::throw::throw("join: result taken twice"),
        }
    }

    /// Whether a `Packet<T>` fits a pooled block.
    const POOLED: bool = core::mem::size_of::<Packet<T>>() <= PACKET_BLOCK_SIZE
        && core::mem::align_of::<Packet<T>>() <= PACKET_BLOCK_ALIGN;

    /// A new packet with two owners: the goroutine's and the handle's.
    /// From the P's packet cache when it fits a block, else from the
    /// global allocator. Aborts (`handle_alloc_error`) if memory is out,
    /// as `Arc::new` would.
    fn new_pair() -> (PacketRef<T>, PacketRef<T>) {
        let raw = if Self::POOLED {
            acquire_packet_block()
        } else {
            // SAFETY: Packet<T> has a non-zero size (two atomics).
            unsafe { std::alloc::alloc(std::alloc::Layout::new::<Packet<T>>()) }
        };
        let Some(ptr) = ptr::NonNull::new(raw.cast::<Packet<T>>()) else {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<Packet<T>>())
        };
        // SAFETY: fresh memory, sized and aligned for Packet<T>.
        unsafe {
            ptr.as_ptr().write(Packet {
                refs: AtomicUsize::new(2),
                state: AtomicUsize::new(PENDING),
                result: UnsafeCell::new(None),
            })
        };
        (PacketRef { ptr }, PacketRef { ptr })
    }
}

/// One owner's reference to a [`Packet`] (an `Arc` of exactly two owners
/// whose memory comes from the packet caches).
struct PacketRef<T> {
    ptr: ptr::NonNull<Packet<T>>,
}

// SAFETY: as Arc<Packet<T>>: the packet is Sync for T: Send, and the last
// owner, on whichever thread, drops the T it may hold (T: Send).
unsafe impl<T: Send> Send for PacketRef<T> {}
// SAFETY: as above; &PacketRef only reads through &Packet.
unsafe impl<T: Send> Sync for PacketRef<T> {}

impl<T> core::ops::Deref for PacketRef<T> {
    type Target = Packet<T>;
    #[inline]
    fn deref(&self) -> &Packet<T> {
        // SAFETY: the packet lives while any PacketRef to it does.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Drop for PacketRef<T> {
    fn drop(&mut self) {
        // Release: this owner's uses of the packet happen before the
        // other owner frees it (Arc's protocol).
        if self.refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Acquire: pairs with the other owner's Release decrement.
        core::sync::atomic::fence(Ordering::Acquire);
        let p = self.ptr.as_ptr();
        // SAFETY: the last owner; nobody else can reach the packet.
        unsafe { ptr::drop_in_place(p) };
        if Packet::<T>::POOLED {
            release_packet_block(p.cast());
        } else {
            // SAFETY: allocated in new_pair with this layout.
            unsafe { std::alloc::dealloc(p.cast(), std::alloc::Layout::new::<Packet<T>>()) };
        }
    }
}

// ---------------------------------------------------------------------------
// Join packet caches (Go's per-P sudogcache and sched.sudogcache, for
// the one allocation a spawn makes: its JoinHandle's packet).
//
// A spawner's P allocates the packet and the goroutine frees it, often on
// another P, so glibc's thread caches overflow on one side and run dry on
// the other, and every packet crossed a malloc arena lock (measured in
// docs/BENCHMARKS.md, session 16). Packets of up to PACKET_BLOCK_SIZE
// bytes instead come from fixed-size blocks: each P holds two magazines
// (intrusive lists) of up to PACKET_MAG blocks, and a depot under its own
// lock trades full magazines between Ps, one lock per PACKET_MAG
// packets and no list walks (Bonwick's magazine layer). Plain threads,
// having no P, use the allocator directly; blocks are allocated with
// PACKET_LAYOUT either way, so any block may go either way.

/// Size of a pooled packet block in bytes (a `Packet<T>` with `T` of up to
/// 24 bytes, e.g. `()`, integers, `Vec`, `String`, fits: checked below).
const PACKET_BLOCK_SIZE: usize = 64;

const _: () = assert!(
    Packet::<()>::POOLED
        && Packet::<[u64; 3]>::POOLED
        && Packet::<String>::POOLED
        && Packet::<Vec<u8>>::POOLED
);
/// Alignment of a pooled block in bytes.
const PACKET_BLOCK_ALIGN: usize = 16;
/// Blocks per magazine.
const PACKET_MAG: u32 = 64;
/// Full magazines the depot keeps (256 KiB of blocks); beyond that a
/// spilled magazine's blocks go back to the allocator.
const PACKET_DEPOT_MAX: usize = 64;

const PACKET_LAYOUT: std::alloc::Layout =
    match std::alloc::Layout::from_size_align(PACKET_BLOCK_SIZE, PACKET_BLOCK_ALIGN) {
        Ok(l) => l,
        Err(_) => panic!("bad packet layout"),
    };

/// A free block: the next block of its magazine, and (in the depot, on a
/// magazine's first block) the next magazine.
#[repr(C)]
struct FreeBlock {
    next: *mut FreeBlock,
    next_mag: *mut FreeBlock,
}

/// An intrusive list of free blocks and its length.
#[derive(Clone, Copy)]
struct Mag {
    head: *mut FreeBlock,
    n: u32,
}

impl Mag {
    const EMPTY: Mag = Mag {
        head: ptr::null_mut(),
        n: 0,
    };
}

/// A P's packet cache: the loaded magazine, which allocations pop and
/// frees push, and the previous one, full or empty. Owner M only.
pub(crate) struct PacketCache {
    loaded: core::cell::Cell<Mag>,
    prev: core::cell::Cell<Mag>,
}

impl PacketCache {
    pub(crate) const fn new() -> PacketCache {
        PacketCache {
            loaded: core::cell::Cell::new(Mag::EMPTY),
            prev: core::cell::Cell::new(Mag::EMPTY),
        }
    }
}

/// Full magazines, linked through their first blocks' `next_mag`.
struct Depot {
    head: *mut FreeBlock,
    n: usize,
}

// SAFETY: the blocks are reachable only through PACKET_DEPOT's lock.
unsafe impl Send for Depot {}

static PACKET_DEPOT: crate::lock_futex::RtMutex<Depot> = crate::lock_futex::RtMutex::new(Depot {
    head: ptr::null_mut(),
    n: 0,
});

/// Mirror of the depot's length, written under its lock; read without it
/// (Relaxed: a stale value costs one empty lock round or one malloc).
static PACKET_DEPOT_N: AtomicUsize = AtomicUsize::new(0);

/// Go's acquireSudog, for a packet block: from this P's magazines, a
/// full magazine from the depot, or the allocator (null if memory is out).
fn acquire_packet_block() -> *mut u8 {
    let (mp, pp) = park::acquirem_p();
    let _ml = crate::m::MLock::of(mp);
    if pp.is_null() {
        // SAFETY: PACKET_LAYOUT has a non-zero size.
        return unsafe { std::alloc::alloc(PACKET_LAYOUT) };
    }
    // SAFETY: the P is held by this M for the section.
    let c = unsafe { &(*pp).packetcache };
    let mut m = c.loaded.get();
    if m.n == 0 {
        let prev = c.prev.get();
        if prev.n > 0 {
            c.prev.set(m);
            m = prev;
        } else if PACKET_DEPOT_N.load(Ordering::Relaxed) > 0 {
            let mut d = PACKET_DEPOT.lock();
            if !d.head.is_null() {
                m = Mag {
                    head: d.head,
                    n: PACKET_MAG,
                };
                // SAFETY: a full magazine's first block, owned under the lock.
                d.head = unsafe { (*m.head).next_mag };
                d.n -= 1;
                PACKET_DEPOT_N.store(d.n, Ordering::Relaxed);
            }
        }
        if m.n == 0 {
            // SAFETY: PACKET_LAYOUT has a non-zero size.
            return unsafe { std::alloc::alloc(PACKET_LAYOUT) };
        }
    }
    let b = m.head;
    // SAFETY: b heads our magazine: a free block only this P reaches.
    m.head = unsafe { (*b).next };
    m.n -= 1;
    c.loaded.set(m);
    // The next packet's line, probably last written by the P that freed
    // it: fetch it a whole spawn ahead (a no-op on null).
    crate::arch::prefetch_write(m.head as usize);
    b.cast()
}

/// Go's releaseSudog, for a packet block: onto this P's loaded magazine;
/// a full one swaps with an empty previous one or goes to the depot (or,
/// the depot full, back to the allocator).
fn release_packet_block(b: *mut u8) {
    let (mp, pp) = park::acquirem_p();
    let _ml = crate::m::MLock::of(mp);
    if pp.is_null() {
        // SAFETY: allocated with PACKET_LAYOUT (pooled or not).
        return unsafe { std::alloc::dealloc(b, PACKET_LAYOUT) };
    }
    // SAFETY: the P is held by this M for the section.
    let c = unsafe { &(*pp).packetcache };
    let mut m = c.loaded.get();
    if m.n == PACKET_MAG {
        let prev = c.prev.get();
        c.prev.set(m);
        m = Mag::EMPTY;
        if prev.n > 0 {
            spill_packet_mag(prev);
        }
    }
    let b = b.cast::<FreeBlock>();
    // SAFETY: the block is dead and ours; PACKET_BLOCK_SIZE holds a FreeBlock.
    unsafe { (*b).next = m.head };
    m.head = b;
    m.n += 1;
    c.loaded.set(m);
}

/// Moves magazine `m` to the depot if it is full and the depot has room,
/// else frees its blocks.
#[cold]
fn spill_packet_mag(m: Mag) {
    if m.n == PACKET_MAG {
        let mut d = PACKET_DEPOT.lock();
        if d.n < PACKET_DEPOT_MAX {
            // SAFETY: our magazine's first block.
            unsafe { (*m.head).next_mag = d.head };
            d.head = m.head;
            d.n += 1;
            PACKET_DEPOT_N.store(d.n, Ordering::Relaxed);
            return;
        }
    }
    let mut b = m.head;
    while !b.is_null() {
        // SAFETY: a free block of our magazine.
        let next = unsafe { (*b).next };
        // SAFETY: allocated with PACKET_LAYOUT.
        unsafe { std::alloc::dealloc(b.cast(), PACKET_LAYOUT) };
        b = next;
    }
}

fn join_commit(_gp: *mut G, arg: *mut u8) -> bool {
    // SAFETY: arg is (&AtomicUsize state, &Waiter) on the parked G's stack.
    let (state, w) = unsafe { *(arg as *const (*const AtomicUsize, *const Waiter)) };
    // AcqRel: Release publishes the waiter; failing means DONE: resume.
    // SAFETY: state points into the Packet the joiner holds a PacketRef to.
    unsafe { &*state }
        .compare_exchange(PENDING, w as usize, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// An owned permission to join a goroutine (like `std::thread::JoinHandle`).
/// Dropping it detaches the goroutine.
pub struct JoinHandle<T> {
    packet: PacketRef<T>,
    id: u64,
    /// `fn() -> T`, not `T`: the handle only ever yields a T, so it is
    /// `Send + Sync` for any `T: Send` (like std's), not only `T: Sync`.
    _t: PhantomData<fn() -> T>,
}

impl<T> JoinHandle<T> {
    /// Waits for the goroutine to finish: parks the calling goroutine, or
    /// blocks the calling OS thread. `Err(payload)` if it panicked. No Go
    /// counterpart (Go waits with a channel or a `sync.WaitGroup`); a dump
    /// shows the wait as `chan receive`.
    ///
    /// Panics if the goroutine joins itself (it would wait for ever; std's
    /// `join` may panic the same way, with EDEADLK).
    #[track_caller]
    pub fn join(self) -> std::thread::Result<T> {
        let p = &*self.packet;
        // Acquire: pairs with complete's Release.
        if p.state.load(Ordering::Acquire) != DONE {
            if crate::current_id() == Some(self.id) {
                panic!("goro: goroutine {} cannot join itself (deadlock)", self.id);
            }
            let gp = park::parkable_g();
            let w = Waiter {
                g: gp,
                parker: Parker::new(),
            };
            if !gp.is_null() {
                let args: (*const AtomicUsize, *const Waiter) = (&p.state, &w);
                park::gopark(
                    Some(join_commit),
                    &args as *const _ as *mut u8,
                    crate::waitreason::WaitReason::Join,
                );
            } else if p
                .state
                .compare_exchange(
                    PENDING,
                    &w as *const Waiter as usize,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                w.parker.park();
            }
            // Acquire: pairs with complete's Release swap.
            if p.state.load(Ordering::Acquire) != DONE {
                crate::throw::throw("join: woken before completion");
            }
        }
        p.take()
    }

    /// Whether the goroutine has finished (its result is ready, so `join`
    /// would not wait). Never blocks. No Go counterpart.
    pub fn is_finished(&self) -> bool {
        self.packet.state.load(Ordering::Acquire) == DONE
    }

    /// The goroutine's id (unique per process, as `current_id` reports it,
    /// and as dumps and panic reports print it). Never blocks. No Go
    /// counterpart (Go hides goroutine ids).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle").field("id", &self.id).finish()
    }
}

/// Spawns with options; shared by `spawn` and `Builder::spawn`.
pub(crate) fn spawn_with<F, T>(
    f: F,
    stack_size: Option<usize>,
    name: Option<Box<str>>,
) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    install_panic_hook();
    let (packet, their) = Packet::new_pair();
    let id = newproc(
        move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // Goroutine-locals die with the goroutine, before join sees it;
            // a destructor's panic is the goroutine's (crate::local::drop_locals_into).
            let r = crate::local::drop_locals_into(r);
            // With the handle gone (detached), the packet's last owner is
            // `their`: the result or panic payload is dropped here. A
            // destructor that panics must not unwind into the goroutine's
            // entry (no frame there can catch it): abort with a clear
            // message, as std does for a thread's result.
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                their.complete(r);
                drop(their);
            }));
            if done.is_err() {
                crate::throw::throw(
                    "a detached goroutine's result or panic payload panicked on drop",
                );
            }
            // That destructor may have used goroutine-locals again: drop
            // them too, or the next goroutine on this G would start with
            // them (h27: it saw the value instead of the initialiser's).
            let _ = std::panic::catch_unwind(crate::local::drop_locals);
        },
        stack_size,
        name,
    )?;
    Ok(JoinHandle {
        packet,
        id,
        _t: PhantomData,
    })
}

/// Spawns a goroutine running `f` (Go's `go f()`); `go!` is the same.
/// The goroutine starts on the current P's runnext (it runs soon, and
/// another M may steal it). Starts the runtime if needed.
///
/// Panics if the goroutine's stack cannot be mapped (address space or
/// `vm.max_map_count` exhausted); use [`Builder::spawn`] to get the error.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match spawn_with(f, None, None) {
        Ok(h) => h,
        Err(e) => panic!("goro::spawn: {e}"),
    }
}

/// Goroutine factory with options (like `std::thread::Builder`).
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with the runtime defaults: no name, the configured stack
    /// size. Never blocks and does not start the runtime. No Go
    /// counterpart (Go's `go` statement takes no options).
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the goroutine (shown in diagnostics: dumps and panic reports
    /// print it Rust-escaped, a stack overflow report as is). Any UTF-8
    /// string, no length limit; it is stored with the goroutine until it
    /// exits. Never blocks. No Go counterpart (Go's goroutines are unnamed;
    /// pprof labels come closest).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// Stack reservation in bytes (guard page not included). Pages are
    /// committed only when touched. The runtime default
    /// ([`crate::Config::stack_size`]) is used as is; other sizes are
    /// rounded up to a power of two (at least [`crate::MIN_STACK_SIZE`],
    /// 64 KiB) up to [`crate::MAX_POOLED_STACK_SIZE`] (64 MiB), and their
    /// goroutines reuse dead ones' stacks of the same size from per-P free
    /// lists as default spawns do (no lock, no system call). Sizes above
    /// 64 MiB are rounded up to a power of two too but not pooled: each
    /// such spawn and exit returns a stack to a global cache (one lock and
    /// one `madvise` each), from which the next spawn of that power takes
    /// it. A size above [`crate::MAX_STACK_SIZE`] (1 TiB) makes
    /// [`spawn`](Builder::spawn) return an `InvalidInput` error; a size the
    /// OS cannot map makes it return the OS error. Go's maximum goroutine
    /// stack, 1 GiB, works.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// The name and stack size, for the other spawn paths (scoped).
    pub(crate) fn into_parts(self) -> (Option<usize>, Option<Box<str>>) {
        (self.stack_size, self.name.map(String::into_boxed_str))
    }

    /// Spawns the goroutine (Go's `go` statement), from a goroutine or a
    /// plain thread. Errors: an impossible stack size (`InvalidInput`), or
    /// its stack could not be mapped (the OS error); nothing is spawned then.
    pub fn spawn<F, T>(self, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_with(f, self.stack_size, self.name.map(String::into_boxed_str))
    }
}
