#!/usr/bin/env bash
# Cache misses per wake-up, counted by cachegrind (deterministic: on a shared
# 2-core VM, wall-clock figures for a change of a few cache lines drown in
# noise, docs/BENCHMARKS.md session 27). Runs benches/core's `wakes` twice per
# workload at GOMAXPROCS=1 and prints, per extra wake-up, instructions and L1
# data misses (cachegrind's D1: 32 KiB, 8-way, 64-byte lines, as the machine's).
#
#   benches/misses.sh [N]        N goroutines (default 1000)
#
# Needs valgrind. Compare two builds by running it in each checkout.
set -euo pipefail
n=${1:-1000}
command -v valgrind >/dev/null || { echo "misses: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cd "$(dirname "$0")/.."
cargo build --release -q -p goro-bench-core --bin wakes
bin=target/release/wakes
# One cachegrind run: prints "instructions d1_misses".
count() {
    GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=yes \
        --D1=32768,8,64 --LL=33554432,16,64 --cachegrind-out-file=/dev/null \
        "$bin" "$@" 2>&1 >/dev/null |
        awk '/I *refs:/ { gsub(",", "", $4); i = $4 } /D1 *misses:/ { gsub(",", "", $4); d = $4 } END { print i, d }'
}
# workload, small and large count, wake-ups per unit of the count
per() {
    local what=$1 lo=$2 hi=$3 per_unit=$4
    read -r i1 d1 < <(count "$what" "$n" "$lo")
    read -r i2 d2 < <(count "$what" "$n" "$hi")
    awk -v i1="$i1" -v i2="$i2" -v d1="$d1" -v d2="$d2" -v w=$(((hi - lo) * per_unit)) -v what="$what" -v n="$n" \
        'BEGIN { printf "%-6s N=%-6d per wake-up: %7.1f instructions, %5.2f L1d misses\n", what, n, (i2 - i1) / w, (d2 - d1) / w }'
}
per net 5 25 "$n"
per netdl 5 25 "$n"
per ring 100000 500000 1
