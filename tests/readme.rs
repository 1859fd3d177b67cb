//! The README's first example is examples/hello.rs verbatim (below its
//! `//!` header), and it computes the same total on every run.

#[path = "../examples/hello.rs"]
#[allow(dead_code)]
mod hello;

mod common;

/// The example's code, without its leading `//!` lines.
fn example_body() -> String {
    include_str!("../examples/hello.rs")
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn readme_shows_examples_hello() {
    let _w = common::watchdog();
    let readme = include_str!("../README.md");
    let body = example_body();
    assert!(
        readme.contains(&format!("```rust\n{body}\n```")),
        "README.md's first example differs from examples/hello.rs:\n{body}"
    );
}

#[test]
fn readme_example_total_is_deterministic() {
    let _w = common::watchdog();
    for _ in 0..common::scale(50) {
        assert_eq!(hello::total(), 7_998_000);
    }
}
