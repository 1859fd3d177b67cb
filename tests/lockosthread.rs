//! Ports of proc_test.go's LockOSThread cases: a locked goroutine runs
//! only on its thread, its thread runs nothing else, and exiting while
//! locked retires the thread.

mod common;
use common::qemu;
use std::collections::HashSet;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// The calling OS thread's kernel id.
fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

/// TestLockOSThread-like: a locked goroutine that parks and is readied many
/// times (channel ping-pong, sleeps, yields) always resumes on its thread,
/// while other goroutines keep running.
#[test]
fn locked_goroutine_stays_on_its_thread() {
    let _s = SERIAL.lock().unwrap();
    let rounds = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let (ping_tx, ping_rx) = goro::chan::<u32>(0);
        let (pong_tx, pong_rx) = goro::chan::<u32>(0);
        let partner = goro::go!(move || {
            for v in ping_rx.iter() {
                pong_tx.send(v + 1).unwrap();
            }
        });
        let locked = goro::go!(move || {
            goro::lock_os_thread();
            let me = tid();
            let mut moved = 0;
            for i in 0..rounds {
                ping_tx.send(i).unwrap();
                assert_eq!(pong_rx.recv().unwrap(), i + 1);
                if i % 100 == 0 {
                    goro::yield_now();
                    goro::time::sleep(std::time::Duration::from_micros(10));
                }
                if tid() != me {
                    moved += 1;
                }
            }
            goro::unlock_os_thread();
            moved
        });
        assert_eq!(
            locked.join().unwrap(),
            0,
            "a locked goroutine resumed on another thread"
        );
        partner.join().unwrap();
    });
}

/// While a goroutine is locked, its thread runs no other goroutine.
#[test]
fn locked_thread_runs_nothing_else() {
    let _s = SERIAL.lock().unwrap();
    let n = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let (tid_tx, tid_rx) = goro::chan::<i64>(1);
        let (release_tx, release_rx) = goro::chan::<()>(0);
        let locked = goro::go!(move || {
            goro::lock_os_thread();
            tid_tx.send(tid()).unwrap();
            // Park until released: the M must not run others meanwhile.
            release_rx.recv().unwrap();
            goro::unlock_os_thread();
        });
        let locked_tid = tid_rx.recv().unwrap();
        let seen: Vec<i64> = (0..n)
            .map(|_| {
                goro::go!(|| {
                    goro::yield_now();
                    tid()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        release_tx.send(()).unwrap();
        locked.join().unwrap();
        assert!(
            !seen.contains(&locked_tid),
            "another goroutine ran on the locked thread"
        );
    });
}

/// Lock/unlock nest: the goroutine stays wired until the outermost unlock;
/// extra unlocks are no-ops.
#[test]
fn nesting_and_extra_unlock() {
    let _s = SERIAL.lock().unwrap();
    goro::run(|| {
        goro::unlock_os_thread(); // no-op when not locked
        goro::lock_os_thread();
        goro::lock_os_thread();
        let me = tid();
        goro::unlock_os_thread();
        for _ in 0..50 {
            goro::time::sleep(std::time::Duration::from_micros(50));
            assert_eq!(tid(), me, "still locked after one of two unlocks");
        }
        goro::unlock_os_thread();
        goro::unlock_os_thread();
    });
}

/// Exiting while locked retires the thread: no goroutine runs on it later,
/// and the scheduler keeps working (TestLockOSThreadExit-like).
#[test]
fn exit_while_locked_retires_thread() {
    let _s = SERIAL.lock().unwrap();
    let n = if qemu() { 200 } else { 2000 };
    goro::run(move || {
        let dead_tid = goro::go!(|| {
            goro::lock_os_thread();
            tid()
        })
        .join()
        .unwrap();
        let tids: HashSet<i64> = (0..n)
            .map(|_| {
                goro::go!(|| {
                    goro::yield_now();
                    tid()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert!(
            !tids.contains(&dead_tid),
            "a retired thread ran a goroutine"
        );
    });
}

/// Outside a goroutine the calls are no-ops.
#[test]
fn no_op_on_plain_thread() {
    goro::lock_os_thread();
    goro::unlock_os_thread();
    goro::unlock_os_thread();
}
