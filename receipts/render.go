package receipts

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"net/http"
	"sort"
	"strings"
)

// page is the receipt for people: every value goes through html/template's
// escaping; the only style is inline under a per-response nonce; no script,
// no external asset.
var page = template.Must(template.New("receipt").Funcs(template.FuncMap{
	"lines": func(s string) []string { return strings.Split(s, "\n") },
	"inc":   func(i int) int { return i + 1 },
	"pretty": func(raw json.RawMessage) string {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		return string(b)
	},
	"sortedKeys": func(m map[string]string) []string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return keys
	},
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Receipt {{.R.ID}}</title>
<style nonce="{{.Nonce}}">
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem;color:#1d1d1f;background:#fff}
h1{font-size:1.25rem;margin:.2rem 0 1rem}h2{font-size:1rem;margin:1.5rem 0 .5rem}
.ok{color:#0a7a2f}.error{color:#b3261e}
table.meta{border-collapse:collapse}table.meta td{padding:.15rem .8rem .15rem 0;vertical-align:top}
pre{background:#f5f5f7;padding:.6rem;overflow-x:auto;font:13px/1.4 ui-monospace,monospace;margin:0}
ol.code{background:#f5f5f7;margin:0;padding:.6rem .6rem .6rem 3rem;font:13px/1.4 ui-monospace,monospace;overflow-x:auto}
ol.code li{white-space:pre}
ul.logs{list-style:none;padding:0;margin:0;font:13px/1.4 ui-monospace,monospace}ul.logs li{white-space:pre-wrap;border-bottom:1px solid #eee;padding:.15rem 0}
</style>
</head>
<body>
<h1>Run receipt <small>{{.R.ID}}</small></h1>
<table class="meta">
<tr><td>Outcome</td><td class="{{.R.Outcome.Status}}">{{.R.Outcome.Status}}{{with .R.Outcome.Error}}: {{.Code}} — {{.Message}}{{end}}</td></tr>
{{with .R.ExecutionID}}<tr><td>Execution</td><td>{{.}} (retained handler)</td></tr>{{end}}
{{with .R.Kind}}<tr><td>Kind</td><td>{{.}}</td></tr>{{end}}
{{with .R.Model}}<tr><td>Model</td><td>{{.}}</td></tr>{{end}}
{{if .R.Children}}<tr><td>Spawned</td><td>{{len .R.Children}} children{{range .R.Children}}; depth {{.Depth}} {{.Outcome}} {{printf "%.1f" .DurationMs}} ms{{end}}</td></tr>{{end}}
<tr><td>Tenant</td><td>{{.R.Tenant}}</td></tr>
<tr><td>Registry</td><td>{{.R.Registry}}</td></tr>
<tr><td>Received</td><td>{{.R.Timing.Received.Format "2006-01-02 15:04:05.000 MST"}}</td></tr>
<tr><td>Duration</td><td>{{printf "%.1f" .R.Timing.DurationMs}} ms</td></tr>
<tr><td>Capabilities</td><td>{{if .R.Grants.Capabilities}}{{range $i, $c := .R.Grants.Capabilities}}{{if $i}}, {{end}}{{$c}}{{end}}{{else}}none{{end}}</td></tr>
{{if .R.Grants.Providers}}<tr><td>Providers</td><td>{{range $p, $tools := .R.Grants.Providers}}{{$p}}: {{range $i, $t := $tools}}{{if $i}}, {{end}}{{$t}}{{end}}; {{end}}</td></tr>{{end}}
{{if .R.Grants.Outbound}}<tr><td>Outbound</td><td>{{range $i, $h := .R.Grants.Outbound}}{{if $i}}, {{end}}{{$h}}{{end}}</td></tr>{{end}}
{{if .R.Grants.EnvKeys}}<tr><td>Env keys</td><td>{{range $i, $k := .R.Grants.EnvKeys}}{{if $i}}, {{end}}{{$k}}{{end}} (values are never kept)</td></tr>{{end}}
{{if .R.Outcome.Denials}}<tr><td>Denied</td><td>{{range $i, $d := .R.Outcome.Denials}}{{if $i}}, {{end}}{{$d}}{{end}}</td></tr>{{end}}
{{if .R.Truncated}}<tr><td>Truncated</td><td>{{range $i, $t := .R.Truncated}}{{if $i}}, {{end}}{{$t}}{{end}}</td></tr>{{end}}
</table>
{{if .R.Outcome.Result}}<h2>Result</h2><pre>{{pretty .R.Outcome.Result}}</pre>{{end}}
{{with .R.Prompt}}<h2>Prompt</h2><pre>{{.}}</pre>{{end}}
{{range $i, $s := .R.Steps}}<h2>Step {{inc $i}}: {{$s.Name}} <small class="{{$s.Outcome.Status}}">{{$s.Outcome.Status}}{{with $s.Outcome.Error}}: {{.Code}} — {{.Message}}{{end}}, {{printf "%.1f" $s.DurationMs}} ms</small></h2>
<p>Input</p><pre>{{pretty $s.Input}}</pre>
{{if $s.Outcome.Result}}<p>Output</p><pre>{{pretty $s.Outcome.Result}}</pre>{{end}}
<ol class="code">{{range lines $s.Code}}<li>{{.}}</li>{{end}}</ol>
{{if $s.Logs}}<ul class="logs">{{range $s.Logs}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{end}}
{{if not .R.Steps}}<h2>Code</h2>
<ol class="code">{{range lines .R.Code}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{range $name := sortedKeys .R.Modules}}<h2>Module {{$name}}</h2><ol class="code">{{range lines (index $.R.Modules $name)}}<li>{{.}}</li>{{end}}</ol>{{end}}
<h2>Logs</h2>
{{if .R.Logs}}<ul class="logs">{{range .R.Logs}}<li>{{.}}</li>{{end}}</ul>{{else}}<p>No console output.</p>{{end}}
</body>
</html>
`))

// Render writes the receipt page with its security headers.
func Render(w http.ResponseWriter, r Receipt) error {
	nonceBytes := make([]byte, 16)
	rand.Read(nonceBytes)
	nonce := base64.StdEncoding.EncodeToString(nonceBytes)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+nonce+"'; img-src 'none'; script-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	return page.Execute(w, struct {
		R     Receipt
		Nonce string
	}{r, nonce})
}
