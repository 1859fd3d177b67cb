#!/usr/bin/env bash
# Paired A/B rounds of HTTP servers under wrk, for changes too small for
# compare.sh's medians to show: in each round every server runs once, so a
# slow spell of the machine hits all of them; the summary is the median over
# rounds of each server's req/s divided by the first server's in the same
# round, plus each server's CPU per request (user and system µs from
# /proc/PID/stat) and wrk's (user + system µs, from the shell's `times`:
# what serving in that way costs the client on the shared CPUs).
# Round r starts with server number r (mod the count), so each takes each
# slot equally often: the slot alone moved a median by up to 3% (A/A run,
# docs/BENCHMARKS.md session 19). AB_ORDER=fixed keeps the given order.
#
#   benches/http_ab.sh CONNS SECS ROUNDS NAME=CMD [NAME=CMD ...]
#
# CMD is run as `GOMAXPROCS=2 CMD 127.0.0.1:PORT` and must serve
# HTTP/1.1 keep-alive there within 0.4 s (examples/http_hello, the peers'
# `http_server tokio|may`, benches/go/http_hello). Needs wrk. Example
# (docs/BENCHMARKS.md, session 19):
#
#   cargo build --release --example http_hello
#   benches/http_ab.sh 1000 5 10 base=/tmp/http_hello_before new=target/release/examples/http_hello
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,21p "$0" >&2; exit 2; }
conns=$1 secs=$2 rounds=$3
shift 3
command -v wrk >/dev/null || { echo "http_ab: wrk not found (apt-get install wrk)" >&2; exit 1; }
tick=$(getconf CLK_TCK)
# Below Linux's default ephemeral range (32768-60999), so that no client
# connection of an earlier round holds the port.
port=$((20000 + RANDOM % 10000))
results=$(mktemp)
srvlog=$(mktemp)
cputimes=$(mktemp)
trap 'rm -f "$results" "$srvlog" "$cputimes" "$cputimes".[01]' EXIT
# All CPUs' steal time and total time so far, in ticks (/proc/stat).
cpu_steal_total() { awk '/^cpu /{t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t}' /proc/stat; }
# The server of round $r named $name is gone: say so with its output.
gone() { echo "http_ab: round $r: $name exited; its output:" >&2; cat "$srvlog" >&2; exit 1; }
specs=("$@")
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    order=("${specs[@]}")
    if [ "${AB_ORDER:-rotate}" != fixed ]; then
        k=$(((r - 1) % ${#specs[@]}))
        order=("${specs[@]:k}" "${specs[@]:0:k}")
    fi
    for spec in "${order[@]}"; do
        name=${spec%%=*} cmd=${spec#*=}
        port=$((port + 1))
        # shellcheck disable=SC2086 # CMD may carry arguments
        GOMAXPROCS=2 $cmd "127.0.0.1:$port" >"$srvlog" 2>&1 &
        pid=$!
        sleep 0.4
        read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null) || gone
        # wrk's CPU: the change in this shell's children's user + system
        # time (`times`' second line) across it. `times` runs here, not in
        # a $(...) subshell, which would see only its own children; the
        # server is reaped only after wrk, so it does not count.
        times >"$cputimes.0"
        read -r st0 tot0 < <(cpu_steal_total)
        out=$(wrk -t2 -c"$conns" -d"${secs}s" "http://127.0.0.1:$port/" 2>&1)
        times >"$cputimes.1"
        read -r st1 tot1 < <(cpu_steal_total)
        # The host's steal (time this VM's vCPUs were runnable but not
        # run) over the round, in % of all CPU time: rounds with any
        # steal measure the host, not the server.
        steal=$(((st1 - st0) * 100 / (tot1 - tot0 > 0 ? tot1 - tot0 : 1)))
        wrk_s=$(awk 'FNR == 2 { gsub(/[ms]/, " "); t[++n] = $1 * 60 + $2 + $3 * 60 + $4 }
            END { print t[2] - t[1] }' "$cputimes.0" "$cputimes.1")
        read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null) || gone
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
        reqs=$(awk '/requests in/{print $1}' <<<"$out")
        [ -n "$rps" ] && [ -n "$reqs" ] || { echo "http_ab: $name gave no result:" >&2; echo "$out" >&2; exit 1; }
        echo "$r $name $rps $(((u1 - u0))) $(((s1 - s0))) $reqs $wrk_s" >>"$results"
        line+=" $name=${rps%.*}"
        [ "$steal" -eq 0 ] || line+="(steal ${steal}%)"
    done
    echo "$line" >&2
done
python3 - "$results" "$tick" "$@" <<'PY'
import sys, statistics
path, tick, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = [s.split('=', 1)[0] for s in specs]
rows = {}
for l in open(path):
    r, n, rps, u, s, reqs, w = l.split()
    rows[(int(r), n)] = (float(rps), int(u), int(s), int(reqs), float(w))
rounds = sorted({r for r, _ in rows})
ref = names[0]
for n in names:
    rps = [rows[(r, n)][0] for r in rounds]
    us = [1e6 * rows[(r, n)][1] / tick / rows[(r, n)][3] for r in rounds]
    sy = [1e6 * rows[(r, n)][2] / tick / rows[(r, n)][3] for r in rounds]
    wk = [1e6 * rows[(r, n)][4] / rows[(r, n)][3] for r in rounds]
    line = (f"{n}: median {statistics.median(rps):,.0f} req/s; CPU per request: server "
            f"user {statistics.mean(us):.2f} µs, system {statistics.mean(sy):.2f} µs, "
            f"wrk {statistics.mean(wk):.2f} µs (means)")
    if n != ref:
        ratios = [rows[(r, n)][0] / rows[(r, ref)][0] for r in rounds]
        line += (f"; {n}/{ref} per round: median {statistics.median(ratios):.3f}, "
                 f"at or above in {sum(x >= 1 for x in ratios)}/{len(ratios)}")
    print(line)
PY
