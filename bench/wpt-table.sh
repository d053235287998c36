#!/usr/bin/env bash
# Regenerates docs/runtime.md's conformance table: the vendored WPT .any.js
# files inside an isolate (sandbox/wpt_any_test.go) and the same programs
# in Node (the machine's node), passed/total per area.
# Usage: bash bench/wpt-table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dump=$(mktemp -d)
trap 'rm -rf "$dump"' EXIT
RETAINER_WPT_DUMP="$dump" RETAINER_WPT_UPDATE=1 CGO_ENABLED=1 go test ./sandbox -run TestWPTAny -count=1 >/dev/null
git checkout -q -- sandbox/testdata/wpt-expectations.txt 2>/dev/null || true
node bench/wpt-node.js "$dump" > "$dump/table.md"
python3 - "$dump/table.md" <<'PY'
import re, sys
table = open(sys.argv[1]).read().strip()
doc = open("docs/runtime.md").read()
start, end = "<!-- wpt-table -->", "<!-- /wpt-table -->"
block = start + "\n" + table + "\n" + end
if start in doc:
    doc = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda m: block, doc, flags=re.S)
else:
    doc += "\n## Web-platform-tests, area by area\n\n" + block + "\n"
open("docs/runtime.md", "w").write(doc)
print(table)
PY
