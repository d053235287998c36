#!/usr/bin/env bash
# Side by side on one machine, in one run (issue 13): Caddy `respond`, the
# trivial counter handle, the URL-parsing counter handle, and workerd
# (pinned in bench/workerd/package.json, installed from npm) serving the
# same two handlers; interleaved rounds, ratios at the end.
# Usage: bash bench/compare.sh [seconds per target, default 8] [rounds, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-2}
source bench/lib.sh
(cd bench/workerd && npm install --no-audit --no-fund --silent >/dev/null)
start_gateway
(cd bench/workerd && exec ./node_modules/.bin/workerd serve config.capnp) > "$work/workerd.log" 2>&1 &
wd=$!
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8092/ && break; sleep 0.2; done
json_code() { python3 -c 'import json,sys; print(json.dumps({"retainHandles": True, "code": open(sys.argv[1]).read()}))' "$1"; }
trivial=$(deploy "$(json_code bench/workerd/trivial.js)")
url=$(deploy "$(json_code bench/workerd/worker.js)")
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label respond -url http://respond.localhost:8089/ -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-trivial -addr 127.0.0.1:8092 -url "http://127.0.0.1:8092/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-url -url "http://$url.apps.localhost:8089/items?id=42&sort=asc" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-url -addr 127.0.0.1:8091 -url "http://127.0.0.1:8091/items?id=42&sort=asc" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 - "$results" <<'PY'
import sys, collections
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    rates[f[0]].append(float(f[1]))
avg = {k: sum(v) / len(v) for k, v in rates.items()}
print("averages: " + ", ".join("%s %.0f" % kv for kv in avg.items()))
print("retainer-trivial / respond: %.2f" % (avg["retainer-trivial"] / avg["respond"]))
print("retainer-url / workerd-url: %.2f" % (avg["retainer-url"] / avg["workerd-url"]))
print("retainer-trivial / workerd-trivial: %.2f" % (avg["retainer-trivial"] / avg["workerd-trivial"]))
PY
