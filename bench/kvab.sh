#!/usr/bin/env bash
# The kv counter ÷ the trivial handler, for two builds side by side (a kv
# change's before and after, issue 62): each binary runs its own gateway,
# both serve the trivial counter and the kv read-modify-write counter of
# bench/kv.sh, and short slices of load alternate between the four (the
# builds ABBA, the two handlers in turn), so the machine's drift falls on
# all alike. Prints each slice, and per build the medians and the median
# of each round's counter ÷ trivial; then each counter's final value
# against the increments it acknowledged (nothing lost).
# Ports: KVAB_PORTS="8089 8189" by default (two free ones for a shared
# machine where another bench runs).
# Usage: bash bench/kvab.sh OLD NEW [seconds a slice, default 2] [rounds, default 6] [loadgen flags, default -c 32]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/helpers.sh
old=$(realpath "$1")
new=$(realpath "$2")
secs=${3:-2}
rounds=${4:-6}
shift $(($# < 4 ? $# : 4))
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-c 32)
read -r pa pb <<<"${KVAB_PORTS:-8089 8189}"
work=$(mktemp -d)
trap 'kill ${ga:-} ${gb:-} 2>/dev/null || true; wait ${ga:-} ${gb:-} 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/loadgen" ./bench/loadgen
export BENCH_SECRET="bench-secret-bench-secret-bench-secret"
start_builds "$old" "$new" "$pa" "$pb" "$work"
trivial='{"retainHandles": true, "code": "let s = 0; export default { fetch() { return Response.json({served: ++s}) } }"}'
counter='{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": "export default { async fetch(r, env) { const n = Number(await env.kv.get(\"c\") || 0) + 1; await env.kv.put(\"c\", String(n)); return Response.json({n}) } }"}'
deploy() { curl -s -H 'Host: api.localhost' "http://127.0.0.1:$1/executions" -d "$2" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'; }
ta=$(deploy "$pa" "$trivial")
ka=$(deploy "$pa" "$counter")
tb=$(deploy "$pb" "$trivial")
kb=$(deploy "$pb" "$counter")
cpu() { # the utime+stime ticks of a gateway and its workers
	local w=0 p
	for p in $(pgrep -P "$1"); do w=$((w + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo "$(awk '{print $14+$15}' "/proc/$1/stat") $w"
}
acked=$work/acked
slice() { # build target gateway port handle
	local before after out n
	before=$(cpu "$3")
	out=$("$work/loadgen" -label "$1" -addr "127.0.0.1:$4" -url "http://$5.apps.localhost:$4/" -d "${secs}s" "${flags[@]}" 2>"$work/err")
	after=$(cpu "$3")
	n=$(answered "$work/err")
	[ "$2" = counter ] && echo "$1 $n" >> "$acked"
	echo "$out $2 $(echo "$before $after" | awk -v t="$(getconf CLK_TCK)" -v n="$n" '{printf "| gateway %.0f worker %.0f total %.0f us", ($3-$1)/t*1e6/n, ($4-$2)/t*1e6/n, ($3-$1+$4-$2)/t*1e6/n}')"
}
pair() { # build
	if [ "$1" = old ]; then set -- old "$ga" "$pa" "$ta" "$ka"; else set -- new "$gb" "$pb" "$tb" "$kb"; fi
	if [ $((r % 2)) = 1 ]; then
		slice "$1" trivial "$2" "$3" "$4"
		slice "$1" counter "$2" "$3" "$5"
	else
		slice "$1" counter "$2" "$3" "$5"
		slice "$1" trivial "$2" "$3" "$4"
	fi
}
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then pair old; pair new; else pair new; pair old; fi
done | tee "$work/slices"
python3 - "$work/slices" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault((f[0], f[-9]), []).append(float(f[1]))
print()
for b in ("old", "new"):
    t, k = rows[(b, "trivial")], rows[(b, "counter")]
    ratios = [y / x for x, y in zip(t, k)]
    print("%s: trivial median %.0f req/s, counter median %.0f req/s; counter ÷ trivial per round %s, median %.2f" % (
        b, statistics.median(t), statistics.median(k), " ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
PY
for b in old new; do
	if [ $b = old ]; then port=$pa; else port=$pb; fi
	want=$(awk -v b=$b '$1 == b {s += $2} END {print s + 0}' "$acked")
	got=$(curl -s -H 'Host: api.localhost' "http://127.0.0.1:$port/executions" -d '{"capabilities": ["kvRead"], "code": "async () => kv.get(\"c\")"}' | sed -E 's/.*"result":"?([0-9]+)"?.*/\1/')
	echo "$b: the counter holds $got after $want increments answered 200 (the warm-up's included: at least as many)"
done
