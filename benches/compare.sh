#!/usr/bin/env bash
# Side-by-side scheduler benchmarks: Go vs goro vs may vs tokio (vs
# corosensei and std threads where meaningful).
#
#   benches/compare.sh [workload ...]        # default: all workloads
#   benches/compare.sh mutex_uncontended mutex mutex_slack mutex_work wg_uncontended wg_adddone
#   benches/compare.sh http                  # optional: HTTP/1.1 keep-alive servers under wrk
#   benches/compare.sh net                   # optional: echo10k (goro, Go, tokio, may), idleconn
#                                            # (goro vs Go); each can also be named alone
#
# Environment:
#   REPEAT=5        runs per (workload, impl); the table shows the median
#   IMPLS="..."     subset of: go goro goro_std goro_pl may tokio corosensei std
#                   (goro_std / goro_pl: goroutines using std::sync::Mutex /
#                   parking_lot::Mutex, mutex workloads only)
#   QUICK=1         divide every N by 10 (smoke test; numbers are noisier)
#   TIMEOUT=120     seconds per single run; a run over it counts as n/a
#   NET_CONNS=10000 connections of the net workloads (echo10k, idleconn)
#
# Each run is its own process, so a crash (e.g. may running out of
# vm.max_map_count) becomes an n/a cell with the reason listed below the
# table instead of stopping the script. Multi-P workloads run with
# GOMAXPROCS=2 / 2 workers for every implementation, one-P workloads with 1
# (tokio then uses its current_thread runtime). Shapes: benches/peers/README.md.
# Full RESULT lines go to benches/peers/target/compare-results.txt.
set -uo pipefail

REPEAT=${REPEAT:-5}
QUICK=${QUICK:-0}
TIMEOUT=${TIMEOUT:-120}
IMPLS=${IMPLS:-"go goro goro_std goro_pl may tokio corosensei std"}
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=$HERE/peers
TARGET=$PEERS/target
mkdir -p "$TARGET"
RESULTS=$TARGET/compare-results.txt
BUILDLOG=$TARGET/compare-build.log
: >"$RESULTS"
: >"$BUILDLOG"

SYNC_WORKLOADS="mutex_uncontended mutex mutex_slack mutex_work wg_uncontended wg_adddone"
PREEMPT_WORKLOADS="syscall preempt blocking blocking_guarded preempt_overhead"
ALL_WORKLOADS="switch yield spawn spawn_wait chansync prodcons100 threadring select2 rss burst idle trace $SYNC_WORKLOADS $PREEMPT_WORKLOADS"
# Optional (not in the default list): goro::net vs Go's net (and, for
# echo10k, tokio's and may's). echo10k: NET_CONNS connections to an echo server, N round trips of
# 32 bytes each, value round trips/s; idleconn: N connections each held by
# a goroutine parked in read, value (VmRSS + VmPTE growth) / N in KiB. Each
# run is a server process and a client child (10,000 connections in one
# process would need 20,000 fds). Shapes: benches/peers/README.md.
NET_WORKLOADS="echo10k idleconn"
WORKLOADS=${*:-$ALL_WORKLOADS}
[ "$WORKLOADS" = net ] && WORKLOADS=$NET_WORKLOADS
for w in $NET_WORKLOADS; do
    if [[ " $WORKLOADS " == *" $w "* ]]; then
        ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
        break
    fi
done

notes=()
note() { notes+=("$*"); }

median() { # values... -> median (or empty)
    [ $# -eq 0 ] && return
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2 }'
}

paired() { # "a1 a2 .." "b1 b2 .." -> median of a_i/b_i and how many >= 1, e.g. "0.97 (4/10)"
    local a=($1) b=($2) i k=0 r=()
    if [ ${#a[@]} -eq 0 ] || [ ${#a[@]} -ne ${#b[@]} ]; then
        echo "n/a"
        return
    fi
    for i in "${!a[@]}"; do
        r+=("$(awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN {printf "%.4f", x / y}')")
        awk -v v="${r[-1]}" 'BEGIN {exit !(v >= 1)}' && k=$((k + 1))
    done
    printf '%s (%d/%d)\n' "$(median "${r[@]}" | awk '{printf "%.2f", $1}')" "$k" "${#a[@]}"
}

# ------------------------------------------------------------- http -------
# `compare.sh http`: the same minimal HTTP/1.1 keep-alive server (one
# goroutine/task per connection, fixed 13-byte body) in Go (net.Listener,
# benches/go/http_hello), goro (examples/http_hello.rs), tokio and may
# (peers' http_server), each with 2 Ps/workers, driven by
# `wrk -t2 -c100` and `-c1000` for HTTP_DURATION (default 10s). Reports
# requests/s and wrk's p99 latency. Separate from the default table.
#   HTTP_DURATION=5s HTTP_IMPLS="go goro tokio may" HTTP_CONNS="100 1000" HTTP_REPEAT=3
# HTTP_REPEAT rounds (default 3) alternate the servers, each round starting
# with the next one; the table shows
# medians and a goro/peer req/s ratio (> 1: goro serves more).
http_bench() {
    local dur=${HTTP_DURATION:-10s} impls=${HTTP_IMPLS:-"go goro tokio may"}
    local conns=${HTTP_CONNS:-"100 1000"} root
    root=$(cd "$HERE/.." && pwd)
    command -v wrk >/dev/null || { echo "http: wrk not found" >&2; exit 1; }
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    echo "building http servers ..." >&2
    local goro_bin=$root/target/release/examples/http_hello
    local peer_bin=$TARGET/release/http_server
    local go_bin=$TARGET/go-http-hello
    cargo build --release --manifest-path "$root/Cargo.toml" --example http_hello >>"$BUILDLOG" 2>&1 ||
        note "goro: examples/http_hello did not build (see $BUILDLOG)"
    cargo build --release --manifest-path "$PEERS/Cargo.toml" --no-default-features --bin http_server \
        >>"$BUILDLOG" 2>&1 || note "tokio/may: http_server did not build (see $BUILDLOG)"
    (cd "$HERE/go/http_hello" && GO111MODULE=off GOFLAGS= go build -o "$go_bin" http_hello.go) \
        >>"$BUILDLOG" 2>&1 || note "go: http_hello did not build (see $BUILDLOG)"
    declare -A RPS P99
    local port=18480 i c r rounds=${HTTP_REPEAT:-3}
    # Rounds alternate the servers, so a slow spell of this shared machine
    # hits every server alike; the table gives the median of the rounds.
    # Round r starts with server r (go goro tokio may, goro tokio may go,
    # ...): each takes each slot equally often, as the slot alone moved a
    # median by up to 3% (docs/BENCHMARKS.md, session 19).
    local -a order
    read -ra order <<<"$impls"
    for r in $(seq 1 "$rounds"); do
    local k=$(((r - 1) % ${#order[@]}))
    for i in "${order[@]:k}" "${order[@]:0:k}"; do
        local cmd=()
        case $i in
            go) cmd=("$go_bin") ;;
            goro) cmd=("$goro_bin") ;;
            tokio | may) cmd=("$peer_bin" "$i") ;;
        esac
        port=$((port + 1))
        local out=$TARGET/http-$i.out
        GOMAXPROCS=2 "${cmd[@]}" "127.0.0.1:$port" >"$out" 2>&1 &
        local pid=$!
        local tries=0
        until grep -q '^listening on' "$out" 2>/dev/null; do
            tries=$((tries + 1))
            if [ $tries -gt 100 ] || ! kill -0 $pid 2>/dev/null; then break; fi
            sleep 0.1
        done
        if ! grep -q '^listening on' "$out"; then
            note "$i: server did not start: $(tail -n 2 "$out" | tr '\n' ' ')"
            kill $pid 2>/dev/null
            continue
        fi
        for c in $conns; do
            echo "  [http] round $r/$rounds $i -c$c -d$dur" >&2
            local w
            w=$(wrk -t2 -c"$c" -d"$dur" --latency "http://127.0.0.1:$port/" 2>&1)
            echo "== $i c=$c round $r" >>"$RESULTS"
            echo "$w" >>"$RESULTS"
            RPS[$i/$c]+=" $(awk '/^Requests\/sec/ {printf "%.0f", $2}' <<<"$w")"
            # p99 in ms whatever unit wrk chose (us, ms, s).
            P99[$i/$c]+=" $(awk '$1 == "99%" {v = $2 + 0; u = $2; sub(/^[0-9.]+/, "", u);
                if (u == "us") v /= 1000; else if (u == "s") v *= 1000; printf "%.2f", v}' <<<"$w")"
            local errs
            errs=$(grep -E 'Socket errors|Non-2xx' <<<"$w" | tr -s ' ' | tr '\n' ' ')
            [ -n "$errs" ] && note "$i -c$c round $r: $errs"
        done
        kill $pid 2>/dev/null
        wait $pid 2>/dev/null
    done
    done
    echo
    echo "### HTTP/1.1 keep-alive hello server, wrk -t2 -d$dur, 2 Ps/workers, median of $rounds alternating rounds ($(nproc) CPUs, $(go version 2>/dev/null | awk '{print $3}'))"
    echo
    local head="| impl |" rule="|---|"
    for c in $conns; do
        head+=" req/s c=$c | p99 ms c=$c |"
        rule+="---:|---:|"
    done
    [ "$impls" != "${impls/goro/}" ] && for c in $conns; do
        head+=" goro/peer req/s c=$c | goro/peer per round c=$c |"
        rule+="---|---|"
    done
    echo "$head"
    echo "$rule"
    local k
    declare -A MRPS
    for k in "${!RPS[@]}"; do MRPS[$k]=$(median ${RPS[$k]} | awk '{printf "%.0f", $1}'); done
    for i in $impls; do
        local row="| $i |"
        for c in $conns; do
            row+=" ${MRPS[$i/$c]:-n/a} | $(median ${P99[$i/$c]:-}) |"
        done
        for c in $conns; do
            if [ "$i" != goro ] && [ -n "${MRPS[$i/$c]:-}" ] && [ -n "${MRPS[goro/$c]:-}" ]; then
                row+=" $(awk -v a="${MRPS[goro/$c]}" -v b="${MRPS[$i/$c]}" 'BEGIN {printf "%.2f", a / b}') |"
                row+=" $(paired "${RPS[goro/$c]}" "${RPS[$i/$c]}") |"
            else
                row+=" | |"
            fi
        done
        echo "$row"
    done
    echo
    echo "goro/peer per round: the median over rounds of goro's req/s divided by the"
    echo "peer's in the same round (servers alternate within a round, so a slow spell"
    echo "of the machine hits both), and in how many rounds goro was at or above."
    echo
    echo "Each round's req/s and p99 (ms):"
    for i in $impls; do
        for c in $conns; do
            echo "- $i c=$c: req/s${RPS[$i/$c]:- n/a}; p99${P99[$i/$c]:- n/a}"
        done
    done
    echo
    echo "wrk output: $RESULTS"
    if [ ${#notes[@]} -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${notes[@]}"; do echo "- $n"; done
    fi
}
if [ "${1:-}" = http ]; then
    http_bench
    exit 0
fi

# ---------------------------------------------------------------- build ----
PEERS_BIN=""
build_peers() {
    local label=$1
    shift
    echo "building peers ($label) ..." >&2
    if cargo build --release --manifest-path "$PEERS/Cargo.toml" "$@" >>"$BUILDLOG" 2>&1; then
        PEERS_BIN=$TARGET/release/peers
        return 0
    fi
    return 1
}
if build_peers "goro + goro::__bench::raw_switch_pair"; then
    :
elif build_peers "goro, without the switch hook" --no-default-features --features goro; then
    note "goro switch: goro::__bench::raw_switch_pair did not compile; switch row n/a (see $BUILDLOG)"
elif build_peers "without goro" --no-default-features; then
    note "goro: the goro crate did not compile; goro rows n/a (see $BUILDLOG)"
else
    # The root manifest itself may be unparsable (e.g. a missing target file
    # while the runtime is being written): build a copy with no goro dependency.
    tmp=$(mktemp -d)
    cp -r "$PEERS/Cargo.toml" "$PEERS/Cargo.lock" "$PEERS/src" "$tmp/"
    sed -i -e '/^goro = { path/d' -e 's/^default = .*/default = []/' \
        -e 's/^goro = \["dep:goro"\]/goro = []/' "$tmp/Cargo.toml"
    echo "building peers (detached copy without goro) ..." >&2
    if CARGO_TARGET_DIR=$TARGET/nogoro cargo build --release --manifest-path "$tmp/Cargo.toml" \
        --no-default-features >>"$BUILDLOG" 2>&1; then
        PEERS_BIN=$TARGET/nogoro/release/peers
        note "goro: the root goro manifest/crate did not build; goro rows n/a (see $BUILDLOG)"
    else
        echo "peers failed to build; see $BUILDLOG" >&2
        tail -n 30 "$BUILDLOG" >&2
        exit 1
    fi
fi

GO_BIN=$TARGET/go-peers
echo "building go-peers ..." >&2
if ! (cd "$HERE/go" && GO111MODULE=off GOFLAGS= go build -o "$GO_BIN" main.go net.go) >>"$BUILDLOG" 2>&1; then
    note "go: go build failed; go column n/a (see $BUILDLOG)"
    GO_BIN=""
fi

# ------------------------------------------------------------ parameters ---
procs_for() { case $1 in switch | yield | syscall | preempt | blocking | blocking_guarded) echo 1 ;; *) echo 2 ;; esac; }

n_for() { # workload impl -> N
    local w=$1 i=$2 n
    case $w in
        switch) n=10000000 ;;
        yield) n=2000000 ;; # per goroutine (2x yields in total)
        spawn | spawn_wait) n=1000000 ;;
        chansync) n=2000000 ;;
        prodcons100) n=5000000 ;;
        threadring) n=10000000 ;;
        select2) n=1000000 ;;
        rss) n=100000 ;;
        mutex_uncontended | wg_uncontended) n=50000000 ;;
        mutex | mutex_slack | mutex_work | wg_adddone) n=10000000 ;;
        syscall) n=2000000 ;;
        preempt) n=50 ;;           # 10 ms sleeps beside a hog
        blocking | blocking_guarded) n=10 ;; # 8 goroutines x N x 50 ms
        preempt_overhead) n=2000000000 ;;  # xorshift steps shared by 8 goroutines
        burst) n=50000 ;;          # goroutines x ~33 KiB of stack, then 15 s idle
        idle) n=100 ;;             # parked goroutines; switches/s over 2 s of idleness
        trace) n=1000000 ;;        # thread-ring hops, tracing off then on
        echo10k) n=10 ;;           # round trips per connection (NET_CONNS connections)
        idleconn) n=10000 ;;       # connections
    esac
    # Scaled-down N for implementations whose per-op cost is 10-1000x higher,
    # to keep the whole script within ~10 minutes; ns/op stays comparable.
    case $i/$w in
        std/yield) n=200000 ;;
        std/spawn | std/spawn_wait) n=10000 ;;
        std/chansync | std/select2 | std/threadring) n=50000 ;;
        std/prodcons100) n=1000000 ;;
        std/rss) n=10000 ;; # 100k threads exceed vm.max_map_count (2 VMAs each)
        may/spawn) n=50000 ;; # ~50 us per spawn with 2 workers
        may/select2) n=20000 ;; # may::select! spawns a coroutine per arm
        tokio/mutex_uncontended) n=10000000 ;; # ~60 ns per async lock/unlock
        may/mutex | may/mutex_slack | may/mutex_work) n=2000000 ;; # ~400 ns/op contended
        tokio/mutex | tokio/mutex_slack | tokio/mutex_work) n=2000000 ;;
    esac
    if [ "$QUICK" = 1 ]; then
        case $w in preempt | blocking | blocking_guarded | echo10k | idleconn) ;; *) n=$((n / 10)) ;; esac
    fi
    echo "$n"
}

applicable() { # impl workload
    case $1/$2 in
        go/echo10k | goro/echo10k | tokio/echo10k | may/echo10k | go/idleconn | goro/idleconn) return 0 ;;
        */echo10k | */idleconn) return 1 ;; # echo10k: + tokio, may; idleconn: goro::net vs Go's net only
        std/idle) return 1 ;; # threads parked in the kernel: nothing to compare
        corosensei/switch | corosensei/yield) return 0 ;;
        corosensei/*) return 1 ;;
        goro_std/mutex* | goro_pl/mutex*) return 0 ;;
        goro_std/* | goro_pl/*) return 1 ;; # foreign locks: mutex workloads only
        go/wg_* | goro/wg_*) return 0 ;;
        go/trace | goro/trace) return 0 ;;
        */trace) return 1 ;; # goro::trace vs runtime/trace only
        go/syscall | goro/syscall | go/preempt* | goro/preempt* | go/blocking* | goro/blocking*) return 0 ;;
        */syscall | */preempt* | */blocking*) return 1 ;; # goro vs Go only
        */wg_*) return 1 ;; # no WaitGroup in may, tokio, std
    esac
    return 0
}

# ---------------------------------------------------------------- runs -----
declare -A VALS   # "w/i" -> space-separated values
declare -A NA     # "w/i" -> last n/a reason
declare -A NUSED  # "w/i" -> N

run_one() { # workload impl -> appends to VALS / NA
    local w=$1 i=$2 p n out rc line val
    p=$(procs_for "$w")
    n=$(n_for "$w" "$i")
    NUSED[$w/$i]=$n
    local errf=$TARGET/run.stderr
    if [ "$i" = go ]; then
        if [ -z "$GO_BIN" ]; then NA[$w/$i]="go build failed"; return; fi
        out=$(GOMAXPROCS=$p timeout "$TIMEOUT" "$GO_BIN" "$w" "$n" 2>"$errf")
    else
        out=$(GOMAXPROCS=$p timeout "$TIMEOUT" "$PEERS_BIN" "$w" "$i" "$n" "$p" 2>"$errf")
    fi
    rc=$?
    line=$(grep -m1 '^RESULT ' <<<"$out")
    [ -n "$line" ] && echo "$line" >>"$RESULTS"
    if [ -n "$line" ]; then
        val=$(awk '{print $4}' <<<"$line")
        if [ "$val" = "n/a" ]; then
            NA[$w/$i]=$(cut -d' ' -f5- <<<"$line")
            return
        fi
        VALS[$w/$i]="${VALS[$w/$i]:-} $val"
        return
    fi
    local why
    if [ $rc = 124 ]; then
        why="timeout after ${TIMEOUT}s"
    elif [ $rc -gt 128 ]; then
        why="killed by signal $((rc - 128))"
    else
        why="exit $rc"
    fi
    local last
    last=$(grep -v '^note: ' "$errf" | grep -v '^\s*$' | tail -n 2 | tr '\n' ' ' | cut -c1-240)
    NA[$w/$i]="$why: $last"
    echo "RESULT $w $i n/a $why: $last" >>"$RESULTS"
}

start=$(date +%s)
for w in $WORKLOADS; do
    for ((r = 1; r <= REPEAT; r++)); do
        for i in $IMPLS; do
            applicable "$i" "$w" || continue
            echo "  [$w] $i run $r/$REPEAT" >&2
            run_one "$w" "$i"
        done
    done
done
elapsed=$(($(date +%s) - start))

# ---------------------------------------------------------------- table ----
declare -A MED
fmt() { # value -> compact number
    awk -v v="$1" 'BEGIN{ if (v >= 100) printf "%.0f", v; else if (v >= 10) printf "%.1f", v; else printf "%.2f", v }'
}
ratio() { # a b -> a/b
    if [ -n "$1" ] && [ -n "$2" ]; then
        awk -v a="$1" -v b="$2" 'BEGIN{ if (b <= 0) print "—"; else if (a / b < 0.1) printf "%.3fx", a / b; else printf "%.2fx", a / b }'
    else
        echo "—"
    fi
}
cell() { # w i
    local w=$1 i=$2
    if [[ " $IMPLS " != *" $i "* ]]; then echo "—"; return; fi
    if ! applicable "$i" "$w"; then echo "—"; return; fi
    if [ -n "${MED[$w/$i]:-}" ]; then
        local s
        s=$(fmt "${MED[$w/$i]}")
        if [ "${NUSED[$w/$i]:-}" != "$(n_for "$w" go)" ]; then
            s="$s (N=${NUSED[$w/$i]})"
        fi
        echo "$s"
    elif [ -n "${NA[$w/$i]:-}" ]; then
        echo "n/a"
    else
        echo "—"
    fi
}

ALL_IMPLS="go goro goro_std goro_pl may tokio corosensei std"
for w in $WORKLOADS; do
    for i in $ALL_IMPLS; do
        # shellcheck disable=SC2086
        MED[$w/$i]=$(median ${VALS[$w/$i]:-})
        if [ -n "${NA[$w/$i]:-}" ]; then
            notes+=("$w / $i: n/a — ${NA[$w/$i]}")
        fi
    done
done

echo
echo "### goro vs Go / may / tokio — median of $REPEAT runs ($(nproc) CPUs, $(go version 2>/dev/null | awk '{print $3}'), total ${elapsed}s)"
echo
# Columns: the implementations that were run and apply to some workload.
COLS=()
for i in $ALL_IMPLS; do
    [[ " $IMPLS " == *" $i "* ]] || continue
    for w in $WORKLOADS; do
        if applicable "$i" "$w"; then
            COLS+=("$i")
            break
        fi
    done
done
label() { case $1 in goro_std) echo "goro+std::Mutex" ;; goro_pl) echo "goro+parking_lot" ;; *) echo "$1" ;; esac; }
head="| workload | unit |"
rule="|---|---|"
for i in "${COLS[@]}"; do
    head+=" $(label "$i") |"
    rule+="---:|"
done
echo "$head goro/go | goro/may | goro/tokio |"
echo "$rule---:|---:|---:|"
for w in $WORKLOADS; do
    p=$(procs_for "$w")
    unit="ns/op"
    case $w in
        rss) unit="bytes/G" ;;
        burst) unit="% of burst RSS kept 15 s after" ;;
        idle) unit="context switches/s, idle" ;;
        trace) unit="thread ring, trace on/off" ;;
        echo10k) unit="round trips/s (higher is better)" ;;
        idleconn) unit="KiB/conn (RSS+PTE)" ;;
        threadring) unit="ns/hop" ;;
        spawn | spawn_wait) unit="ns/G" ;;
        yield) unit="ns/yield" ;;
        switch) unit="ns/round trip" ;;
        syscall) unit="ns/call" ;;
        preempt) unit="ms worst late" ;;
        blocking | blocking_guarded | preempt_overhead) unit="ms" ;;
    esac
    g=${MED[$w/goro]:-}
    row="| $w (P=$p) | $unit |"
    for i in "${COLS[@]}"; do
        row+=" $(cell "$w" "$i") |"
    done
    row+=" $(ratio "$g" "${MED[$w/go]:-}") | $(ratio "$g" "${MED[$w/may]:-}") | $(ratio "$g" "${MED[$w/tokio]:-}") |"
    echo "$row"
done
echo
if [[ " $WORKLOADS " == *" threadring "* ]]; then
    line="threadring total ms (median):"
    for i in go goro may tokio std; do
        if [ -n "${MED[threadring/$i]:-}" ]; then
            line+=" $i $(awk -v v="${MED[threadring/$i]}" -v n="${NUSED[threadring/$i]}" 'BEGIN{printf "%.0f", v*n/1e6}')"
            [ "${NUSED[threadring/$i]}" != "$(n_for threadring go)" ] && line+=" (N=${NUSED[threadring/$i]})"
            line+=";"
        fi
    done
    echo "$line"
fi
echo "Ratios < 1 mean goro is faster (smaller); echo10k (round trips/s) is the exception: > 1 means goro is faster. (N=...) marks a scaled-down N for that cell."
if [ ${#notes[@]} -gt 0 ]; then
    echo
    echo "Notes:"
    for n in "${notes[@]}"; do echo "- $n"; done
fi
