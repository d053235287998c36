#!/usr/bin/env bash
# The request log's cost for two builds side by side (docs/logs.md, "What
# it costs"): each binary runs its own gateway (as bench/ab.sh: ports 8089
# and 8189), each serves one handle of the handler at 32 connections, in
# slices that alternate (ABBA...). Each slice prints the requests answered,
# the request entries the gateway left out of the store in it
# (retainer_log_entries_lost_total), the bytes the gateway wrote to disk
# (/proc/PID/io write_bytes) and its CPU a request; at the end each
# handle's stored request entries are counted through GET
# /handles/{id}/logs against the requests it answered.
# Usage: bash bench/logab.sh OLD NEW [seconds a slice, default 10] [pairs, default 2] [handler, default bench/workerd/trivial.js]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/helpers.sh
old=$(realpath "$1")
new=$(realpath "$2")
secs=${3:-10}
pairs=${4:-2}
code=${5:-bench/workerd/trivial.js}
work=$(mktemp -d)
trap 'kill ${ga:-} ${gb:-} 2>/dev/null || true; wait ${ga:-} ${gb:-} 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/loadgen" ./bench/loadgen
export BENCH_SECRET="bench-secret-bench-secret-bench-secret"
start_builds "$old" "$new" 8089 8189 "$work"
json=$(python3 -c 'import json, sys; print(json.dumps({"retainHandles": True, "code": open(sys.argv[1]).read()}))' "$code")
deploy() { curl -s -H 'Host: api.localhost' "http://127.0.0.1:$1/executions" -d "$json" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'; }
ia=$(deploy 8089)
ib=$(deploy 8189)
lost() { # admin port
	curl -s "http://127.0.0.1:$1/metrics" | awk '/^retainer_log_entries_lost_total /{printf "%d", $2; f=1} END{if(!f) printf "0"}'
}
written() { awk '/^write_bytes/{print $2}' "/proc/$1/io"; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
slice() { # label pid port admin id
	local l0 w0 c0 n l1 w1 c1
	l0=$(lost "$4"); w0=$(written "$2"); c0=$(cpu "$2")
	"$work/loadgen" -label "$1" -addr "127.0.0.1:$3" -url "http://$5.apps.localhost:$3/items?id=42" -d "${secs}s" -c 32 >/dev/null 2>"$work/err"
	sleep 1.5 # the writer's last commit of the slice
	l1=$(lost "$4"); w1=$(written "$2"); c1=$(cpu "$2")
	n=$(answered "$work/err")
	echo "$1 $n answered, $((l1 - l0)) entries left out ($(awk -v a=$((l1 - l0)) -v n="$n" 'BEGIN{printf "%.1f", 100*a/n}')%), $(((w1 - w0) / 1024)) KiB written ($(awk -v w=$((w1 - w0)) -v n="$n" 'BEGIN{printf "%.0f", w/n}') B a request), gateway $(awk -v c=$((c1 - c0)) -v t="$(getconf CLK_TCK)" -v n="$n" 'BEGIN{printf "%.1f", c/t*1e6/n}') us a request"
	echo "$1 $n" >> "$work/answered"
}
for r in $(seq "$pairs"); do
	if [ $((r % 2)) = 1 ]; then
		slice old "$ga" 8089 2089 "$ia"
		slice new "$gb" 8189 2189 "$ib"
	else
		slice new "$gb" 8189 2189 "$ib"
		slice old "$ga" 8089 2089 "$ia"
	fi
done
stored() { # port id: the handle's request entries, read 1,000 at a time
	python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
port, hid = sys.argv[1], sys.argv[2]
n, cursor, q = 0, "", "since=1970-01-01T00:00:00Z"
while True:
    req = urllib.request.Request("http://127.0.0.1:%s/handles/%s/logs?limit=1000&%s" % (port, hid, q), headers={"Host": "api.localhost"})
    page = json.load(urllib.request.urlopen(req))
    n += sum(1 for e in page["logs"] if e["level"] == "request")
    if len(page["logs"]) < 1000:
        print(n)
        break
    q = "cursor=" + page["cursor"]
PY
}
for b in old new; do
	port=8089 id=$ia
	[ $b = new ] && port=8189 id=$ib
	total=$(awk -v b=$b '$1 == b {n += $2} END {print n}' "$work/answered")
	echo "$b: $(stored $port "$id") request entries stored of $total requests answered"
done
