//! The README's first example, kept here so `cargo test` compiles it and
//! tests/readme.rs checks that the README shows exactly this file and that
//! it prints the same total on every run.
//!
//! `cargo run --release --example hello` prints 7998000.

use std::time::Duration;

/// Four workers send 0..4000 on an unbuffered channel; the first value is
/// taken with `select!` (or a timeout), the rest with a range loop.
pub fn total() -> u64 {
    goro::run(|| {
        let (tx, rx) = goro::chan::<u64>(0); // unbuffered, like make(chan uint64)
        for w in 0..4 {
            let tx = tx.clone();
            goro::go!(move || for i in 0..1000 {
                tx.send(w * 1000 + i).unwrap();
            });
        }
        drop(tx); // the channel closes when the workers finish
        let first = goro::select! {
            recv(rx) -> v => v.unwrap(), // whichever worker sends first
            recv(goro::time::after(Duration::from_secs(10))) -> _ => panic!("no value in 10 s"),
        };
        first + rx.iter().sum::<u64>() // for v := range ch
    })
}

fn main() {
    println!("{}", total()); // 0 + 1 + ... + 3999 = 7998000, every run
}
