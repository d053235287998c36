# Shared by the bench scripts (source it from the repository's root): builds
# the binary and the load generator into $work, and start_gateway starts the
# gateway on bench/Caddyfile.bench (settings from BENCH_* variables) as $gw
# and returns once its API answers. deploy <json> answers the executionId of
# a POST /executions; handle_json <file> is the deploy body that retains the
# handler in file; install_workerd installs the pinned workerd and Deno.
# BENCH_JIT=1 turns V8's JIT on (the Caddyfile's `jit`: a weaker sandbox,
# docs/threat-model.md), to measure what --jitless costs; BENCH_CPUS=shared,
# pinned or auto sets `worker_cpus` (docs/decisions.md).
source bench/helpers.sh
work=$(mktemp -d)
trap 'kill ${gw:-} ${wd:-} 2>/dev/null || true; wait ${gw:-} ${wd:-} 2>/dev/null || true; rm -rf "$work"' EXIT
# BENCH_BINARY runs a gateway built before (another commit's) instead.
if [ -n "${BENCH_BINARY:-}" ]; then
	cp "$BENCH_BINARY" "$work/retainer"
else
	CGO_ENABLED=1 go build -o "$work/retainer" ./cmd/retainer
fi
go build -o "$work/loadgen" ./bench/loadgen
export BENCH_SECRET="bench-secret-bench-secret-bench-secret"

start_gateway() {
	refuse_busy_ports 8089
	local config=bench/Caddyfile.bench extra=""
	[ "${BENCH_JIT:-0}" = 1 ] && extra="$extra\\n\\t\\tjit"
	[ -n "${BENCH_CPUS:-}" ] && extra="$extra\\n\\t\\tworker_cpus $BENCH_CPUS"
	if [ -n "$extra" ]; then
		config="$work/Caddyfile.options"
		sed "s/^\tretainer {\$/\tretainer {$extra/" bench/Caddyfile.bench > "$config"
	fi
	BENCH_STORE="$work/registry.db" XDG_DATA_HOME="$work" XDG_CONFIG_HOME="$work" \
		"$work/retainer" run --config "$config" > "$work/gateway.log" 2>&1 &
	gw=$!
	# Listening is not ready: the API answers 503 until the workers have
	# started, and a deploy made before then fails.
	for _ in $(seq 100); do
		curl -sf -o /dev/null http://127.0.0.1:8089/health -H 'Host: api.localhost' && return 0
		sleep 0.2
	done
	echo "the gateway did not start:" >&2
	cat "$work/gateway.log" >&2
	exit 1
}

deploy() {
	curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions -d "$1" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'
}

handle_json() {
	python3 -c 'import json, sys; print(json.dumps({"retainHandles": True, "code": open(sys.argv[1]).read()}))' "$1"
}

install_workerd() {
	(cd bench/workerd && npm install --no-audit --no-fund --silent >/dev/null)
}
