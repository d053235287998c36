#!/usr/bin/env bash
# Side by side on one machine, in one run (issue 13): Caddy `respond`, the
# trivial counter handle and the URL-parsing counter handle in one gateway,
# and workerd and Deno serving the same two handler files
# (bench/workerd/trivial.js, bench/workerd/worker.js; both pinned in
# bench/workerd/package.json and installed from npm). Interleaved rounds;
# req/s, p50 and p99 averaged over the rounds, and the ratios, at the end.
# Usage: bash bench/compare.sh [seconds per target, default 8] [rounds, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-2}
source bench/lib.sh
install_workerd
start_gateway
(cd bench/workerd && exec ./node_modules/.bin/workerd serve config.capnp) > "$work/workerd.log" 2>&1 &
wd=$!
# Deno runs the same module files with `deno serve` (one thread, as each
# workerd worker and each Retainer handle).
deno=bench/workerd/node_modules/.bin/deno
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8093 bench/workerd/trivial.js > "$work/deno-trivial.log" 2>&1 &
dt=$!
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8094 bench/workerd/worker.js > "$work/deno-url.log" 2>&1 &
du=$!
trap 'kill ${gw:-} ${wd:-} ${dt:-} ${du:-} 2>/dev/null || true; wait ${gw:-} ${wd:-} ${dt:-} ${du:-} 2>/dev/null || true; rm -rf "$work"' EXIT
for port in 8092 8091 8093 8094; do
	for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
done
trivial=$(deploy "$(handle_json bench/workerd/trivial.js)")
url=$(deploy "$(handle_json bench/workerd/worker.js)")
results="$work/results"
q='items?id=42&sort=asc'
for r in $(seq "$rounds"); do
	"$work/loadgen" -label respond -url http://respond.localhost:8089/ -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-trivial -addr 127.0.0.1:8092 -url "http://127.0.0.1:8092/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-trivial -addr 127.0.0.1:8093 -url "http://127.0.0.1:8093/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-url -url "http://$url.apps.localhost:8089/$q" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-url -addr 127.0.0.1:8091 -url "http://127.0.0.1:8091/$q" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-url -addr 127.0.0.1:8094 -url "http://127.0.0.1:8094/$q" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 bench/summary.py "$results" retainer-trivial/respond retainer-trivial/workerd-trivial retainer-url/workerd-url retainer-url/deno-url
