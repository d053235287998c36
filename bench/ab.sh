#!/usr/bin/env bash
# Two builds side by side (for a change's before and after): each binary
# runs its own gateway (bench/Caddyfile.bench on port 8089, a copy on
# 8189), both serve the same handler, and short slices of load alternate
# between them (ABBA...), so the machine's drift from minute to minute
# falls on both alike. Prints each slice, the medians, and in how many
# pairs the second build spent less CPU (gateway + worker) a request.
# Build the two first, e.g.:
#   git stash; CGO_ENABLED=1 go build -o /tmp/old ./cmd/retainer; git stash pop
#   CGO_ENABLED=1 go build -o /tmp/new ./cmd/retainer
# Usage: [AB_HANDLES=n | AB_TENANTS=n] [AB_BESIDE=file.json:n] bash bench/ab.sh OLD NEW [seconds a slice, default 2] [pairs, default 12]
#        [handler file, default bench/workerd/worker.js; a .json file is the
#        whole deploy body; the word computation posts `async () => 1 + 1`
#        to /executions instead, one connection back to back unless flags
#        say otherwise] [loadgen flags, default -c 32; -n 200 makes each
#        slice 200 requests (or its seconds, whichever ends first)]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/helpers.sh
old=$(realpath "$1")
new=$(realpath "$2")
secs=${3:-2}
pairs=${4:-12}
code=${5:-bench/workerd/worker.js}
shift $(($# < 5 ? $# : 5))
flags=("$@")
if [ "$code" = computation ]; then
	[ ${#flags[@]} -eq 0 ] && flags=(-c 1)
	flags+=(-method POST -body '{"code": "async () => 1 + 1"}')
fi
[ ${#flags[@]} -eq 0 ] && flags=(-c 32)
work=$(mktemp -d)
trap 'kill ${ga:-} ${gb:-} 2>/dev/null || true; wait ${ga:-} ${gb:-} 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/loadgen" ./bench/loadgen
export BENCH_SECRET="bench-secret-bench-secret-bench-secret"
# AB_TENANTS=n deploys the handler once for each of n tenants (each its
# own token, so each its own worker: `workers auto`) and spreads the
# connections over them round-robin: the many-tenant case of
# bench/tenants.sh, interleaved between two builds.
if [ -n "${AB_TENANTS:-}" ]; then
	export BENCH_WORKERS=auto BENCH_PREWARM=2
	flags=(-rr "${flags[@]}")
fi
start_builds "$old" "$new" 8089 8189 "$work"
# A .json file is the whole deploy body (capabilities and all).
if [ "$code" = computation ]; then
	json=""
elif [[ $code == *.json ]]; then
	json=$(cat "$code")
else
	json=$(python3 -c 'import json, sys; print(json.dumps({"retainHandles": True, "code": open(sys.argv[1]).read()}))' "$code")
fi
deploy() { curl -s -H 'Host: api.localhost' "http://127.0.0.1:$1/executions" -d "$json" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'; }
deploy_tenant() { # port tenant
	local tok
	tok=$("$old" retainer-token --sub "$2" --iss "" --aud "" --secret-env BENCH_SECRET)
	curl -s -H 'Host: tenants.localhost' -H "Authorization: Bearer $tok" "http://127.0.0.1:$1/executions" -d "$json" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'
}
# AB_HANDLES=n deploys n handles of the handler and spreads the
# connections over them (default 1).
urls() { # port
	local u="" i
	if [ "$code" = computation ]; then
		echo "http://api.localhost:$1/executions"
		return
	fi
	if [ -n "${AB_TENANTS:-}" ]; then
		for i in $(seq "$AB_TENANTS"); do
			u="$u${u:+,}http://$(deploy_tenant "$1" "tenant-$i").apps.localhost:$1/items?id=42&sort=asc"
		done
		echo "$u"
		return
	fi
	for i in $(seq "${AB_HANDLES:-1}"); do
		u="$u${u:+,}http://$(deploy "$1").apps.localhost:$1/items?id=42&sort=asc"
	done
	echo "$u"
}
ha=$(urls 8089)
hb=$(urls 8189)
# AB_BESIDE=file.json:n deploys n more handles of that deploy body on each
# gateway, calls each once and leaves them idle: the tenant's other
# handles (e.g. kv handles in its other worker while one counter is
# loaded).
beside() { # port
	local body n i id
	[ -n "${AB_BESIDE:-}" ] || return 0
	body=$(cat "${AB_BESIDE%:*}")
	n=${AB_BESIDE##*:}
	for i in $(seq "$n"); do
		id=$(curl -s -H 'Host: api.localhost' "http://127.0.0.1:$1/executions" -d "$body" | sed -E 's/.*"executionId":"([^"]+)".*/\1/')
		curl -s -o /dev/null -H "Host: $id.apps.localhost" "http://127.0.0.1:$1/"
	done
}
beside 8089
beside 8189
cpu() { # the utime+stime ticks of a gateway and its workers
	local w=0 p
	for p in $(pgrep -P "$1"); do w=$((w + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo "$(awk '{print $14+$15}' "/proc/$1/stat") $w"
}
slice() { # label gateway port urls
	local before after out n
	before=$(cpu "$2")
	out=$("$work/loadgen" -label "$1" -addr "127.0.0.1:$3" -url "$4" -d "${secs}s" "${flags[@]}" 2>"$work/err")
	after=$(cpu "$2")
	cat "$work/err" >&2
	# The requests answered (with -n the run may end before its seconds).
	n=$(answered "$work/err")
	echo "$out $(echo "$before $after" | awk -v t="$(getconf CLK_TCK)" -v n="$n" '{printf "| gateway %.0f worker %.0f total %.0f us", ($3-$1)/t*1e6/n, ($4-$2)/t*1e6/n, ($3-$1+$4-$2)/t*1e6/n}')"
}
for r in $(seq "$pairs"); do
	if [ $((r % 2)) = 1 ]; then
		slice old "$ga" 8089 "$ha"
		slice new "$gb" 8189 "$hb"
	else
		slice new "$gb" 8189 "$hb"
		slice old "$ga" 8089 "$ha"
	fi
done | tee "$work/slices"
python3 - "$work/slices" <<'PY'
import re, statistics, sys
rows = {"old": [], "new": []}
for line in open(sys.argv[1]):
    f = line.split()
    m = re.search(r"gateway (\d+) worker (\d+) total (\d+)", line)
    p50 = re.search(r"p50 (\S+)", line).group(1)
    ms = float(p50[:-2]) if p50.endswith("ms") else float(p50[:-2]) / 1000 if p50.endswith("µs") else float(p50[:-1]) * 1000
    rows[f[0]].append((float(f[1]), int(m.group(1)), int(m.group(2)), int(m.group(3)), ms))
print()
for k, v in rows.items():
    print("%s: median %.0f req/s, gateway %.0f + worker %.0f = %.0f us of CPU a request, p50 %.2f ms" % ((k,) + tuple(statistics.median(x[i] for x in v) for i in range(5))))
pairs = list(zip(rows["old"], rows["new"]))
print("new spent less CPU a request in %d of %d pairs, served more in %d, lower p50 in %d" % (
    sum(1 for a, b in pairs if b[3] < a[3]), len(pairs), sum(1 for a, b in pairs if b[0] > a[0]),
    sum(1 for a, b in pairs if b[4] < a[4])))
PY
