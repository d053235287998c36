#!/usr/bin/env bash
# One handle against 32 (issue 19's "32 counters" target, and what it rests
# on): the trivial counter as one Retainer handle and as 32 handles of one
# tenant, and the same file as one workerd worker and as 32 workers (each
# its own isolate, each on its own port), 32 connections each, interleaved
# rounds. Every connection keeps one request in flight, so with 32
# isolates each call finds its isolate idle and its working set gone from
# the caches since its last call; the ratios say what that costs each
# runtime on this machine. Loopback only.
# Usage: bash bench/isolates.sh [seconds per target, default 6] [rounds, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
rounds=${2:-2}
source bench/lib.sh
install_workerd
start_gateway
# workerd: 32 services running the same module, one socket each.
cp bench/workerd/trivial.js "$work/trivial.js"
python3 - "$work/isolates.capnp" <<'PY'
import sys
n = 32
services = ",\n    ".join('(name = "t%d", worker = (modules = [(name = "worker", esModule = embed "trivial.js")], compatibilityDate = "2024-09-01"))' % i for i in range(n))
sockets = ",\n    ".join('(name = "s%d", address = "127.0.0.1:%d", http = (), service = "t%d")' % (i, 8100 + i, i) for i in range(n))
open(sys.argv[1], "w").write('using Workerd = import "/workerd/workerd.capnp";\nconst config :Workerd.Config = (\n  services = [\n    %s\n  ],\n  sockets = [\n    %s\n  ]\n);\n' % (services, sockets))
PY
workerd=$PWD/bench/workerd/node_modules/.bin/workerd
(cd "$work" && exec "$workerd" serve isolates.capnp) > "$work/workerd.log" 2>&1 &
wd=$!
trap 'kill ${gw:-} ${wd:-} 2>/dev/null || true; wait ${gw:-} ${wd:-} 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:8131/" && break; sleep 0.2; done
code=$(handle_json bench/workerd/trivial.js)
handles=""
for i in $(seq 32); do
	handles="$handles${handles:+,}http://$(deploy "$code").apps.localhost:8089/"
done
one=${handles%%,*}
ports=$(python3 -c 'print(",".join("http://127.0.0.1:%d/" % (8100 + i) for i in range(32)))')
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label retainer-1 -url "$one" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-32 -url "$handles" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-1 -addr "" -url "http://127.0.0.1:8100/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-32 -addr "" -url "$ports" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 - "$results" <<'PY'
import sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    runs[f[0]].append(float(f[1]))
avg = {k: sum(v) / len(v) for k, v in runs.items()}
print()
for k, v in avg.items():
    print("%-12s %8.0f req/s" % (k, v))
print()
print("retainer 32 handles / 1 handle: %.2f" % (avg["retainer-32"] / avg["retainer-1"]))
print("workerd 32 workers / 1 worker: %.2f" % (avg["workerd-32"] / avg["workerd-1"]))
PY
