//! corosensei rows: raw stackful coroutines without any scheduler.

use crate::common::*;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::time::Instant;

pub fn run(w: &Work) -> Res {
    match w.name {
        "switch" => switch(w.n),
        "yield" => yield_rr(w.n),
        _ => not_applicable("corosensei has no scheduler/channels (switch and yield only)"),
    }
}

fn looping() -> Coroutine<(), (), ()> {
    Coroutine::new(|y: &Yielder<(), ()>, _: ()| loop {
        y.suspend(());
    })
}

/// resume + suspend = one round trip (two stack switches).
fn switch(n: u64) -> Res {
    let mut co = looping();
    for _ in 0..n / 10 {
        co.resume(()); // warm up
    }
    let t = Instant::now();
    for _ in 0..n {
        match co.resume(()) {
            CoroutineResult::Yield(()) => {}
            CoroutineResult::Return(()) => unreachable!(),
        }
    }
    Ok(Out::per_op(t.elapsed(), n))
}

/// Lower bound for `yield`: two coroutines, a trivial round-robin loop on the
/// main stack resumes them alternately; each suspend is one "yield".
fn yield_rr(n: u64) -> Res {
    let mut a = looping();
    let mut b = looping();
    let t = Instant::now();
    for _ in 0..n {
        a.resume(());
        b.resume(());
    }
    Ok(Out::per_op(t.elapsed(), 2 * n).with("note", "no-scheduler-round-robin"))
}
