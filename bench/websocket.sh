#!/usr/bin/env bash
# WebSocket echo through one handle beside the same handler in workerd
# (bench/workerd/echo.js, installed from npm, pinned), in one run (issue 42):
# 32 sockets (BENCH_SOCKETS), each sending a 64-byte message and waiting for
# its echo, back to back; messages/s and round-trip p50/p99, interleaved
# rounds, and the ratio at the end.
# Usage: bash bench/websocket.sh [seconds per target, default 8] [rounds, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-2}
conns=${BENCH_SOCKETS:-32}
source bench/lib.sh
go build -o "$work/wsload" ./bench/wsload
install_workerd
start_gateway
(cd bench/workerd && exec ./node_modules/.bin/workerd serve config.capnp) > "$work/workerd.log" 2>&1 &
wd=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:8101/" && break; sleep 0.2; done
echo_id=$(deploy "$(handle_json bench/workerd/echo.js)")
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/wsload" -label retainer-echo -url "ws://$echo_id.apps.localhost:8089/" -d "${secs}s" -c "$conns" | tee -a "$results"
	"$work/wsload" -label workerd-echo -addr 127.0.0.1:8101 -url "ws://127.0.0.1:8101/" -d "${secs}s" -c "$conns" | tee -a "$results"
done
python3 - "$results" <<'PY'
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    rows[f[0]].append((float(f[1]), float(f[4]), float(f[7])))
avg = {k: tuple(sum(x[i] for x in v) / len(v) for i in range(3)) for k, v in rows.items()}
for k, (m, p50, p99) in avg.items():
    print(f"{k:22s} {m:9.0f} msg/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
if "retainer-echo" in avg and "workerd-echo" in avg:
    print(f"retainer/workerd msg/s: {avg['retainer-echo'][0] / avg['workerd-echo'][0]:.2f}")
PY
