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

/// Hang detector for a whole test binary: a test holding the returned guard
/// for longer than a generous limit (5 minutes, 30 under qemu) aborts the
/// process with a message naming the binary and the tests still running,
/// instead of hanging CI. No speed assertion: the limit is minutes. The
/// first call starts one monitor thread for the process (a `static Once`).
pub fn watchdog() -> Watch {
    use std::sync::Once;
    use std::time::{Duration, Instant};
    static START: Once = Once::new();
    let limit = Duration::from_secs(if qemu() { 600 } else { 300 });
    START.call_once(move || {
        std::thread::Builder::new()
            .name("test-watchdog".into())
            .spawn(move || loop {
                // Polling for a hang, not synchronisation.
                std::thread::sleep(Duration::from_secs(1));
                let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
                let hung: Vec<&String> = running
                    .iter()
                    .filter(|(_, t)| t.elapsed() > limit)
                    .map(|(n, _)| n)
                    .collect();
                if !hung.is_empty() {
                    let exe = std::env::current_exe()
                        .ok()
                        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                        .unwrap_or_else(|| "?".into());
                    let all: Vec<&String> = running.iter().map(|(n, _)| n).collect();
                    // Not eprintln!: the harness captures it, and abort
                    // would lose it.
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "watchdog: test binary {exe}: {hung:?} still running after {limit:?} \
                         (running: {all:?}); aborting"
                    );
                    goro::__private::sched_detail();
                    std::process::abort();
                }
            })
            .expect("starting the test watchdog");
    });
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((format!("{name}#{id}"), Instant::now()));
    Watch(format!("{name}#{id}"))
}

static RUNNING: std::sync::Mutex<Vec<(String, std::time::Instant)>> =
    std::sync::Mutex::new(Vec::new());
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A test registered with the [`watchdog`]; unregisters when dropped (also
/// on panic).
pub struct Watch(String);

impl Drop for Watch {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(n, _)| *n != self.0);
    }
}

/// Waits until the goroutine `id` is parked (status Waiting), so that a test
/// acts on a peer that really sleeps (e.g. closes a channel under a parked
/// receiver) rather than one still on its way. Yields meanwhile (as a
/// goroutine, or as a thread). Panics if the goroutine exits first.
pub fn wait_parked(id: u64) {
    loop {
        match goro::__private::goroutine_parked(id) {
            Some(true) => return,
            Some(false) => {}
            None => panic!("goroutine {id} exited before it parked"),
        }
        if goro::current_id().is_some() {
            goro::yield_now();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A command that re-executes this test binary to run only the test
/// `name` (under qemu-aarch64 when the tests run there), for tests whose
/// scenario must run in a fresh process: the caller sets the environment
/// variable that tells the child it is one, and its stdio.
pub fn self_test_command(name: &str) -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = if qemu() && std::env::consts::ARCH == "aarch64" {
        let mut c = std::process::Command::new("qemu-aarch64");
        c.arg("-L").arg("/usr/aarch64-linux-gnu").arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    cmd
}

/// Recurses `i` frames of 1 KiB each (about `i` KiB of stack), touching
/// every frame: makes a goroutine's stack grow before it parks.
#[inline(never)]
pub fn stack_growth_recursive(i: usize) {
    let pad = std::hint::black_box([0u64; 128]);
    for x in pad.iter() {
        if *x != 0 {
            return;
        }
    }
    if i != 0 {
        stack_growth_recursive(i - 1);
    }
    std::hint::black_box(&pad);
}

/// The stack shrinker (runtime/shrink.rs) at its stress setting (passes
/// back to back, every parked goroutine qualifies at once) while held;
/// the defaults (500 ms, 500 ms) come back on drop. Serialises its users
/// within a test binary. Process-wide: other tests of the binary get their
/// parked stacks shrunk meanwhile too, which a correct runtime allows.
pub struct AggressiveShrink(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

pub fn aggressive_shrink() -> AggressiveShrink {
    static SHRINK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let g = SHRINK.lock().unwrap_or_else(|e| e.into_inner());
    goro::__private::set_stack_shrink(std::time::Duration::ZERO, std::time::Duration::ZERO);
    AggressiveShrink(g)
}

impl Drop for AggressiveShrink {
    fn drop(&mut self) {
        let d = std::time::Duration::from_millis(500);
        goro::__private::set_stack_shrink(d, d);
    }
}

/// Sets `opt` (SO_SNDBUF / SO_RCVBUF) of `fd` to 16 KiB.
pub fn small_buffer(fd: std::os::fd::RawFd, opt: libc::c_int) {
    let v: libc::c_int = 16 << 10;
    // SAFETY: a valid socket fd and a c_int option value.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            4,
        )
    };
    assert_eq!(r, 0);
}

/// A goroutine-local value whose destructor panics (tests of what a
/// destructor's panic does to join, scope and errgroup's wait).
pub struct LocalPanicsOnDrop;

impl Drop for LocalPanicsOnDrop {
    fn drop(&mut self) {
        panic!("goroutine-local destructor panics (expected by the test)");
    }
}

goro::goroutine_local! {
    /// Set by a goroutine to fail at its exit.
    pub static FAILS_ON_EXIT: std::cell::RefCell<Option<LocalPanicsOnDrop>> =
        const { std::cell::RefCell::new(None) };
}

/// A value that counts its drops in `drops` and, if `panics`, panics in
/// its destructor after counting (tests that a panicking destructor leaks
/// none of the values dropped with it).
pub struct CountedDrop {
    pub drops: &'static std::sync::atomic::AtomicUsize,
    pub panics: bool,
}

impl Drop for CountedDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.panics {
            panic!("a counted value's destructor panicked (expected by the test)");
        }
    }
}
