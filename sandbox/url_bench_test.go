package sandbox

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkURLLeanVsReference times the runtime's URL (js/url-lean.js)
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
