//! Go's concurrent prime sieve (golang.org/doc/play/sieve.go): a generator
//! goroutine feeds 2, 3, 4, ... into a chain of filter goroutines, one per
//! prime found; each filter drops multiples of its prime.
//!
//! `cargo run --release --example sieve -- N` prints the first N primes,
//! one per line (N = 2000 ends with 17389).

fn generate(tx: goro::Sender<u64>) {
    for i in 2.. {
        if tx.send(i).is_err() {
            return; // downstream gone
        }
    }
}

fn filter(rx: goro::Receiver<u64>, tx: goro::Sender<u64>, prime: u64) {
    for i in rx.iter() {
        if i % prime != 0 && tx.send(i).is_err() {
            return;
        }
    }
}

fn main() {
    let n: usize = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 100,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("usage: sieve [N]: {e}");
            std::process::exit(2);
        }
    };
    let primes = goro::run(move || {
        let (tx, mut rx) = goro::chan::<u64>(0);
        goro::go!(move || generate(tx));
        let mut primes = Vec::with_capacity(n);
        for _ in 0..n {
            let prime = rx.recv().expect("generator stopped");
            primes.push(prime);
            let (tx1, rx1) = goro::chan::<u64>(0);
            let src = std::mem::replace(&mut rx, rx1);
            goro::go!(move || filter(src, tx1, prime));
        }
        primes
    });
    let mut out = String::with_capacity(n * 7);
    for p in primes {
        out.push_str(&p.to_string());
        out.push('\n');
    }
    print!("{out}");
}
