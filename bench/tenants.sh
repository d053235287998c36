#!/usr/bin/env bash
# Cordons at a platform's scale (docs/history/performance-log.md, round 16): one counter
# handle for each of N tenants, served round-robin at 32 connections with
# `workers auto`, for N = 4, 50 and 200 in interleaved rounds; the ratio of
# each to 4 tenants (the median of the rounds'),
# and whether any counter lost its state (the counters' sum must grow by
# exactly the requests answered). Then new tenants' first deploys while
# the largest count is served, a newcomer's first run with a spare
# ready and without, the memory of an idle tenant's worker (RSS, PSS,
# private), and what a worker kill under load fails. Loopback only.
# Usage: [BENCH_TENANTS="4 50 200"] [BENCH_ROUNDS=3] bash bench/tenants.sh [seconds per run, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
secs=${1:-10}
# BENCH_TENANTS (default "4 50 200") are the numbers of tenants measured;
# BENCH_ONLY_RATIOS=1 stops after the ratios (for a build without the
# admin endpoint's budget, to compare).
export BENCH_WORKERS=${BENCH_WORKERS:-auto} BENCH_PREWARM=2
start_gateway

tok() { "$work/retainer" retainer-token --sub "$1" --iss "" --aud "" --secret-env BENCH_SECRET; }
counter='{"retainHandles": true, "code": "let served = 0; export default { fetch() { return Response.json({served: ++served}); } }"}'
deploy_for() {
	curl -s -H "Host: tenants.localhost" -H "Authorization: Bearer $(tok "$1")" http://127.0.0.1:8089/executions -d "$2" |
		sed -E 's/.*"executionId":"([^"]+)".*/\1/'
}
# sum_served adds one request's answer of each handle (each GET counts one).
sum_served() {
	local sum=0 n
	for id in "$@"; do
		n=$(curl -s -H "Host: $id.apps.localhost" http://127.0.0.1:8089/ | sed -E 's/.*"served":([0-9]+).*/\1/')
		case "$n" in *[!0-9]*|"") echo "handle $id answered: $n" >&2; exit 1;; esac
		sum=$((sum + n))
	done
	echo "$sum"
}

ids=()
declare -A rate
counts=(${BENCH_TENANTS:-4 50 200})
# Every tenant is deployed first; then BENCH_ROUNDS rounds (default 3)
# each serve the first n of them for every n in turn, so the machine's
# drift falls on every n alike, and each ratio is the median of its
# rounds' ratios to the first count in the same round.
while [ "${#ids[@]}" -lt "${counts[-1]}" ]; do
	ids+=("$(deploy_for "tenant-${#ids[@]}" "$counter")")
done
declare -A ratios
for round in $(seq "${BENCH_ROUNDS:-3}"); do
	for n in "${counts[@]}"; do
		some=("${ids[@]:0:$n}")
		urls=$(printf 'http://%s.apps.localhost:8089/,' "${some[@]}")
		before=$(sum_served "${some[@]}")
		out=$("$work/loadgen" -label "$n tenants" -rr -url "${urls%,}" -d "${secs}s" -c 32 2>"$work/lg.err")
		echo "$out"
		ok=$(answered "$work/lg.err")
		after=$(sum_served "${some[@]}")
		# Each sum_served GET is one more request per handle.
		lost=$((before + ok + n - after))
		echo "  $n tenants: $ok answered, counters grew by $((after - before - n)): $lost increments lost (0: no state lost)"
		rate[$n]=$(echo "$out" | awk '{for (i=1;i<=NF;i++) if ($i=="req/s") print $(i-1)}')
	done
	for n in "${counts[@]:1}"; do
		ratios[$n]="${ratios[$n]:-} $(python3 -c "print('%.2f' % (${rate[$n]} / ${rate[${counts[0]}]}))")"
	done
done
for n in "${counts[@]:1}"; do
	python3 -c "import statistics; r=[float(x) for x in '${ratios[$n]}'.split()]; print('ratio: $n tenants / ${counts[0]} = %.2f (median of rounds: %s)' % (statistics.median(r), ' '.join('%.2f' % x for x in r)))"
done
[ "${BENCH_ONLY_RATIOS:-0}" = 1 ] && exit 0

# Newcomers under load: while every tenant's counter is served as above,
# new tenants make their first deploy (a retained counter, as a platform's
# new customer does): ten back to back, eight at once, then ten 100 ms
# apart. Each must answer 200 (never OVERLOADED); the times are their
# first answers (a deploy commits its record: the store's fsyncs are in
# them). Tokens are made first (each is a run of the binary).
n=${counts[-1]}
newtok=()
for i in $(seq 28); do newtok+=("$(tok "newcomer-$i")"); done
first_deploy() {
	curl -s -o /dev/null -w "%{http_code} %{time_total}\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $1" \
		http://127.0.0.1:8089/executions -d "$counter"
}
urls=$(printf 'http://%s.apps.localhost:8089/,' "${ids[@]:0:$n}")
"$work/loadgen" -label "$n tenants, newcomers arriving" -rr -url "${urls%,}" -d 8s -c 32 2>"$work/nc.err" &
lg=$!
sleep 1
: > "$work/newcomers"
for i in $(seq 0 9); do echo "back-to-back $(first_deploy "${newtok[$i]}")" >> "$work/newcomers"; done
sleep 1
burst=()
for i in $(seq 10 17); do (echo "at-once $(first_deploy "${newtok[$i]}")" >> "$work/newcomers") & burst+=($!); done
wait "${burst[@]}"
sleep 1
for i in $(seq 18 27); do echo "100ms-apart $(first_deploy "${newtok[$i]}")" >> "$work/newcomers"; sleep 0.1; done
wait $lg || true
grep -v 'answered 200' "$work/nc.err" || true
# Then a second load, and newcomers whose first request is a computation
# (no record to commit: what a first request costs beside its store),
# eight at once and then ten 100 ms apart.
for i in $(seq 28 45); do newtok+=("$(tok "newcomer-$i")"); done
first_run() {
	curl -s -o /dev/null -w "%{http_code} %{time_total}\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $1" \
		http://127.0.0.1:8089/executions -d '{"code": "async () => 1 + 1"}'
}
sleep 2
"$work/loadgen" -label "$n tenants, newcomers computing" -rr -url "${urls%,}" -d 6s -c 32 2>"$work/nc2.err" &
lg=$!
sleep 1
burst=()
for i in $(seq 28 35); do (echo "run-at-once $(first_run "${newtok[$i]}")" >> "$work/newcomers") & burst+=($!); done
wait "${burst[@]}"
sleep 1
for i in $(seq 36 45); do echo "run-100ms-apart $(first_run "${newtok[$i]}")" >> "$work/newcomers"; sleep 0.1; done
wait $lg || true
grep -v 'answered 200' "$work/nc2.err" || true
# BENCH_BURST=N (default 0: none) adds, under a third load, N new tenants'
# first deploys at once: more than the spares kept (eight at 200 tenants),
# so that those past them wait for worker starts; none may answer
# anything but 200.
burst_n=${BENCH_BURST:-0}
if [ "$burst_n" -gt 0 ]; then
	for i in $(seq 46 $((45 + burst_n))); do newtok+=("$(tok "newcomer-$i")"); done
	sleep 2
	"$work/loadgen" -label "$n tenants, a burst of newcomers" -rr -url "${urls%,}" -d 6s -c 32 2>"$work/nc3.err" &
	lg=$!
	sleep 1
	burst=()
	for i in $(seq 46 $((45 + burst_n))); do (echo "burst-at-once $(first_deploy "${newtok[$i]}")" >> "$work/newcomers") & burst+=($!); done
	wait "${burst[@]}"
	wait $lg || true
	grep -v 'answered 200' "$work/nc3.err" || true
fi
python3 - "$work/newcomers" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def waves(title, names):
    some = [r for r in rows if r[0] in names]
    print("%s (%d):" % (title, len(some)))
    for wave in names:
        ms = sorted(float(r[2]) * 1000 for r in some if r[0] == wave)
        bad = [r[1] for r in some if r[0] == wave and r[1] != "200"]
        print("  %-15s ms: %s%s" % (wave, " ".join("%.0f" % x for x in ms), ("  NOT 200: " + " ".join(bad)) if bad else ""))
    ms = sorted(float(r[2]) * 1000 for r in some)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
    print("  all: p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d of %d not 200" % (p(0.5), p(0.99), ms[-1], sum(r[1] != "200" for r in some), len(some)))
waves("newcomers' first deploys under the load", ("back-to-back", "at-once", "100ms-apart"))
waves("newcomers' first computations under the load", ("run-at-once", "run-100ms-apart"))
if any(r[0] == "burst-at-once" for r in rows):
    waves("a burst of newcomers' first deploys, more than the spares (BENCH_BURST)", ("burst-at-once",))
PY

curl -s http://localhost:2089/retainer/workers | python3 -c '
import json,sys
d=json.load(sys.stdin)
ws=[w for w in d["workers"] if w["state"] == "up" and w["tenant"]]
mib=lambda k: sum(w[k] for w in ws)/len(ws)/2**20
print("workers up: %d (tenants %d); per tenant worker: RSS %.1f MiB, PSS %.1f MiB, private %.1f MiB" % (
    len([w for w in d["workers"] if w["state"] == "up"]), len(ws), mib("rssBytes"), mib("pssBytes"), mib("privateBytes")))
for b in d["budget"]:
    print("budget: %(mode)s, %(workers)d workers, %(usedMemory)d of %(workerMemory)d bytes, next %(nextWorker)d" % b
          + ", spares kept %s" % b.get("spares", "1 (before spares.go)"))'

echo "a newcomer's first run (1 s between tenants: the spare ready):"
for i in 1 2 3 4 5; do
	curl -s -o /dev/null -w "  %{time_total} s\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $(tok "ready-$i")" \
		http://127.0.0.1:8089/executions -d '{"code": "async () => 1 + 1"}'
	sleep 1
done
echo "a newcomer's first run (back to back: the spare just taken):"
for i in 1 2 3 4 5; do
	curl -s -o /dev/null -w "  %{time_total} s\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $(tok "burst-$i")" \
		http://127.0.0.1:8089/executions -d '{"code": "async () => 1 + 1"}'
done

echo "worker kills under load (a handle awaiting 20 ms, 32 connections, one kill a second):"
slow=$(deploy_for "killed" '{"retainHandles": true, "timeoutMs": 2000, "code": "export default { async fetch() { await new Promise(r => setTimeout(r, 20)); return new Response(\"ok\"); } }"}')
"$work/loadgen" -label "killed" -url "http://$slow.apps.localhost:8089/" -d 6s -c 32 2>"$work/kill.err" &
lg=$!
kills=0
for _ in 1 2 3 4 5; do
	sleep 1
	pid=$(curl -s http://localhost:2089/retainer/workers | python3 -c '
import json,sys
print(next((w["pid"] for w in json.load(sys.stdin)["workers"] if w["tenant"] == "killed" and w["state"] == "up"), 0))')
	if [ "$pid" != 0 ]; then kill -9 "$pid"; kills=$((kills + 1)); fi
done
wait $lg || true
grep -v 'answered 200' "$work/kill.err" || true
echo "  $kills kills"
