fn main() {
    for _ in 0..3 {
        let n = 20_000_000;
        let d = goro::__bench::raw_switch_pair(n);
        println!("{:.2} ns/round trip", d.as_nanos() as f64 / n as f64);
    }
}
