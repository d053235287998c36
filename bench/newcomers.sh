#!/usr/bin/env bash
# Newcomers under load, alone (the newcomers' part of bench/tenants.sh,
# repeated, without the ratios): N tenants' counters (default 200) served
# round-robin at 32 connections while new tenants make their first deploy
# (a retained counter, `export default`) in waves of ten back to back,
# eight at once and ten 100 ms apart, BENCH_WAVES times (default 2); prints
# each wave's times and all deploys' p50 / p90 / p99 / max and what did
# not answer 200. BENCH_RUN=1 makes the first requests computations
# instead. For comparing builds, run it with BENCH_BINARY=OLD and =NEW in
# turn, under the bench lock.
# Usage: [BENCH_BINARY=…] [BENCH_WAVES=2] bash bench/newcomers.sh [tenants, default 200]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
n=${1:-200}
waves=${BENCH_WAVES:-2}
export BENCH_WORKERS=${BENCH_WORKERS:-auto} BENCH_PREWARM=2
start_gateway

tok() { "$work/retainer" retainer-token --sub "$1" --iss "" --aud "" --secret-env BENCH_SECRET; }
counter='{"retainHandles": true, "code": "let served = 0; export default { fetch() { return Response.json({served: ++served}); } }"}'
first='{"code": "async () => 1 + 1"}'
[ "${BENCH_RUN:-0}" = 1 ] || first=$counter
ids=()
for i in $(seq 0 $((n - 1))); do
	ids+=("$(curl -s -H "Host: tenants.localhost" -H "Authorization: Bearer $(tok "tenant-$i")" http://127.0.0.1:8089/executions -d "$counter" |
		sed -E 's/.*"executionId":"([^"]+)".*/\1/')")
done
per=28
newtok=()
for i in $(seq $((per * waves))); do newtok+=("$(tok "newcomer-$i")"); done
first_deploy() {
	curl -s -o /dev/null -w "%{http_code} %{time_total}\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $1" \
		http://127.0.0.1:8089/executions -d "$first"
}
urls=$(printf 'http://%s.apps.localhost:8089/,' "${ids[@]}")
: > "$work/newcomers"
for w in $(seq 0 $((waves - 1))); do
	base=$((w * per))
	"$work/loadgen" -label "$n tenants, newcomers arriving" -rr -url "${urls%,}" -d 8s -c 32 2>"$work/nc.err" &
	lg=$!
	sleep 1
	for i in $(seq 0 9); do echo "back-to-back $(first_deploy "${newtok[$((base + i))]}")" >> "$work/newcomers"; done
	sleep 1
	burst=()
	for i in $(seq 10 17); do (echo "at-once $(first_deploy "${newtok[$((base + i))]}")" >> "$work/newcomers") & burst+=($!); done
	wait "${burst[@]}"
	sleep 1
	for i in $(seq 18 27); do echo "100ms-apart $(first_deploy "${newtok[$((base + i))]}")" >> "$work/newcomers"; sleep 0.1; done
	wait $lg || true
	grep -v 'answered 200' "$work/nc.err" || true
	sleep 2
done
python3 - "$work/newcomers" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for wave in ("back-to-back", "at-once", "100ms-apart"):
    ms = sorted(float(r[2]) * 1000 for r in rows if r[0] == wave)
    print("  %-13s ms: %s" % (wave, " ".join("%.0f" % x for x in ms)))
ms = sorted(float(r[2]) * 1000 for r in rows)
p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
print("all %d: p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms; %d not 200" % (len(ms), p(0.5), p(0.9), p(0.99), ms[-1], sum(r[1] != "200" for r in rows)))
PY
if [ -n "${BENCH_LOG:-}" ]; then cp "$work/gateway.log" "$BENCH_LOG"; fi
