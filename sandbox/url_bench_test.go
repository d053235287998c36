package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkURLLeanVsReference times the runtime's URL (webapi/url/url-lean.js)
// and whatwg-url's classes in one isolate, interleaved, in the same run
// (go test ./sandbox -run '^$' -bench URLLeanVsReference -benchtime 1x).
func BenchmarkURLLeanVsReference(b *testing.B) {
	out := runWithURLModule(b, `(() => {
const out = [];
const u = 'https://shop.apps.example.com/items?id=42&sort=asc';
for (let round = 0; round < 2; round++) for (const [name, C] of [['lean', {URL: __urlModule.URL}], ['ref', {URL: __urlModule.reference().URL}]]) {
  const N = 5000;
  let t = Date.now();
  for (let i = 0; i < N; i++) new C.URL(u);
  const a = (Date.now() - t) * 1000 / N;
  t = Date.now();
  for (let i = 0; i < N; i++) new C.URL(u).searchParams.get('id');
  const b = (Date.now() - t) * 1000 / N;
  const x = new C.URL(u);
  t = Date.now();
  for (let i = 0; i < N; i++) x.pathname;
  const c = (Date.now() - t) * 1000 / N;
  out.push([name, a, b, c].join(' '));
}
return out.join('\n');
})()`)
	sums := map[string][3]float64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			b.Fatalf("unexpected: %q", line)
		}
		s := sums[f[0]]
		for i := range 3 {
			v, _ := strconv.ParseFloat(f[i+1], 64)
			s[i] += v / 2
		}
		sums[f[0]] = s
	}
	for _, who := range []string{"lean", "ref"} {
		b.ReportMetric(sums[who][0], who+"-new-URL-µs")
		b.ReportMetric(sums[who][1], who+"-with-get-µs")
		b.ReportMetric(sums[who][2], who+"-pathname-µs")
	}
}

// BenchmarkURLNativeVsStateMachine times the parse without the fast path:
// the Go parser (internal/urlparse through webapi/url/url-fast.js) and whatwg-url's
// state machine, interleaved in one isolate, on the URLs the fast path
// refuses (go test ./sandbox -run '^$' -bench URLNativeVsStateMachine
// -benchtime 1x).
func BenchmarkURLNativeVsStateMachine(b *testing.B) {
	inputs := []struct{ name, input, base string }{
		{"relative", "/login?next=%2Fcart", "https://shop.apps.example.com/items?id=42&sort=asc"},
		{"upper-case-host", "https://Shop.Example.com/items?id=42", ""},
		{"ip", "http://127.0.0.1:8080/items?id=42", ""},
		{"fragment", "https://shop.example.com/items#top", ""},
	}
	var script strings.Builder
	script.WriteString("(() => {\nconst { native, js } = __urlModule.parsers();\nconst out = [];\nconst cases = [\n")
	for _, c := range inputs {
		fmt.Fprintf(&script, "[%q, %q, %q],\n", c.name, c.input, c.base)
	}
	script.WriteString(`];
for (let round = 0; round < 2; round++) for (const [name, input, base] of cases) for (const [who, parse] of [['go', native], ['js', js]]) {
  const baseURL = base === '' ? null : js(base);
  const N = 2000;
  const t = Date.now();
  for (let i = 0; i < N; i++) parse(input, { baseURL });
  out.push([name, who, (Date.now() - t) * 1000 / N].join(' '));
}
return out.join('\n');
})()`)
	out := runWithURLModule(b, script.String())
	sums := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			b.Fatalf("unexpected: %q", line)
		}
		v, _ := strconv.ParseFloat(f[2], 64)
		sums[f[0]+"-"+f[1]] += v / 2
	}
	for _, c := range inputs {
		for _, who := range []string{"go", "js"} {
			b.ReportMetric(sums[c.name+"-"+who], c.name+"-"+who+"-µs")
		}
	}
}
