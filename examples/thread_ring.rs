//! The thread-ring benchmark (Computer Language Benchmarks Game): 503
//! goroutines linked in a ring by unbuffered channels pass a token N times;
//! the goroutine holding it when it reaches 0 prints its id (1-based).
//!
//! `cargo run --release --example thread_ring -- N` (N = 50,000,000 prints 292).

const RING: usize = 503;

fn main() {
    let n: u64 = match std::env::args().nth(1).map(|s| s.replace('_', "").parse()) {
        None => 1000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("usage: thread_ring [N]: {e}");
            std::process::exit(2);
        }
    };
    let winner = goro::run(move || {
        let (done_tx, done_rx) = goro::chan::<usize>(1);
        let chans: Vec<_> = (0..RING).map(|_| goro::chan::<u64>(0)).collect();
        let first_tx = chans[0].0.clone();
        for id in 0..RING {
            let rx = chans[id].1.clone();
            let tx = chans[(id + 1) % RING].0.clone();
            let done = done_tx.clone();
            goro::go!(move || {
                for token in rx.iter() {
                    if token == 0 {
                        let _ = done.send(id + 1);
                        return;
                    }
                    if tx.send(token - 1).is_err() {
                        return;
                    }
                }
            });
        }
        drop(chans);
        first_tx.send(n).unwrap();
        done_rx.recv().unwrap()
    });
    println!("{winner}");
}
