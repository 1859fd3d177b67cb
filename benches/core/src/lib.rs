//! Holder crate for goro's criterion microbenchmarks (`benches/core.rs`
//! here); it has no code of its own. Run: `cargo bench -p goro-bench-core`.
