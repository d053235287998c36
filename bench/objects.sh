#!/usr/bin/env bash
# Objects at disk speed (issue 59, docs/objects.md): one file (256 MiB by
# default) uploaded through a handler's bucket.put(key, request.body) and
# through the control plane's PUT /objects/{key}, and downloaded through a
# handler's new Response(object.body), the control plane's GET and, the
# anchor, Caddy's own file_server serving the same bytes from a file; for
# uploads the anchor is dd writing the file with one fsync. Rounds
# interleave the targets; each line is curl's average MiB/s.
# Loopback only.
# Usage: bash bench/objects.sh [MiB, default 256] [rounds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-256}
rounds=${2:-3}
source bench/lib.sh
refuse_busy_ports 8089
mkdir -p "$work/www"
head -c "$((mib << 20))" /dev/urandom > "$work/www/file.bin"
config="$work/Caddyfile.objects"
sed "s/^\tretainer {\$/\tretainer {\n\t\tmax_request_body 4GiB\n\t\tmax_object 4GiB\n\t\tobjects_quota 64GiB\n\t\ttimeout 5s/" bench/Caddyfile.bench > "$config"
printf '\nhttp://files.localhost:8089 {\n\troot * %s\n\tfile_server\n}\n' "$work/www" >> "$config"
BENCH_STORE="$work/registry.db" XDG_DATA_HOME="$work" XDG_CONFIG_HOME="$work" \
	"$work/retainer" run --config "$config" > "$work/gateway.log" 2>&1 &
gw=$!
for _ in $(seq 100); do
	curl -sf -o /dev/null http://127.0.0.1:8089/health -H 'Host: api.localhost' && break
	sleep 0.2
done
h=$(deploy '{"retainHandles": true, "timeoutMs": 5000, "capabilities": ["objectsRead", "objectsWrite"], "code": "export default { async fetch(request, env) { const key = new URL(request.url).pathname.slice(1); if (request.method === \"PUT\") { const o = await env.bucket.put(key, request.body); return Response.json({size: o.size, etag: o.etag}); } const o = await env.bucket.get(key); return o ? new Response(o.body) : new Response(\"not found\", {status: 404}); } }"}')
mibs() { python3 -c 'import sys; print(f"{float(sys.argv[1]) / 1048576:.0f}")' "$1"; }
want=$(md5sum < "$work/www/file.bin" | cut -d' ' -f1)
for r in $(seq "$rounds"); do
	s=$(curl -sf -o "$work/put.json" -w '%{speed_upload}' -T "$work/www/file.bin" "http://127.0.0.1:8089/file.bin" -H "Host: $h.apps.localhost")
	grep -q "$want" "$work/put.json" || { echo "the handler's put answered: $(cat "$work/put.json")" >&2; exit 1; }
	echo "upload handler        $(mibs "$s") MiB/s"
	s=$(curl -sf -o /dev/null -w '%{speed_upload}' -T "$work/www/file.bin" "http://127.0.0.1:8089/objects/plane.bin" -H 'Host: api.localhost')
	echo "upload control plane  $(mibs "$s") MiB/s"
	start=$(date +%s.%N)
	dd if="$work/www/file.bin" of="$work/copy.bin" bs=1M conv=fsync status=none
	end=$(date +%s.%N)
	echo "upload anchor (dd)    $(python3 -c "print(f'{$mib / ($end - $start):.0f}')") MiB/s"
	rm -f "$work/copy.bin"
	s=$(curl -sf -o "$work/got.bin" -w '%{speed_download}' "http://127.0.0.1:8089/file.bin" -H "Host: $h.apps.localhost")
	[ "$(md5sum < "$work/got.bin" | cut -d' ' -f1)" = "$want" ] || { echo "the handler's download differs" >&2; exit 1; }
	echo "download handler      $(mibs "$s") MiB/s"
	s=$(curl -sf -o /dev/null -w '%{speed_download}' "http://127.0.0.1:8089/objects/plane.bin" -H 'Host: api.localhost')
	echo "download control plane $(mibs "$s") MiB/s"
	s=$(curl -sf -o /dev/null -w '%{speed_download}' "http://127.0.0.1:8089/file.bin" -H 'Host: files.localhost')
	echo "download file_server  $(mibs "$s") MiB/s"
	rm -f "$work/got.bin"
done
