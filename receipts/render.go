package receipts

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
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
	"failedStep": failedStep,
	"runLogs":    runLogs,
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
section.step{border-left:3px solid #d2d2d7;padding-left:.8rem;margin:1.2rem 0}section.step h3{font-size:.9rem;margin:.8rem 0 .3rem;color:#515154}
span.from{color:#6e6e73}table.children{border-collapse:collapse}table.children td,table.children th{padding:.15rem .8rem .15rem 0;text-align:left}
</style>
</head>
<body>
<h1>Run receipt <small>{{.R.ID}}</small></h1>
<table class="meta">
<tr><td>Outcome</td><td class="{{.R.Outcome.Status}}">{{.R.Outcome.Status}}{{with .R.Outcome.Error}}: {{.Code}}{{with failedStep $.R}} in step {{.}} (its error is below){{else}} — {{.Message}}{{end}}{{end}}</td></tr>
{{with .R.ExecutionID}}<tr><td>Execution</td><td>{{.}} (retained handler)</td></tr>{{end}}
{{with .R.Kind}}<tr><td>Kind</td><td>{{.}}</td></tr>{{end}}
{{with .R.Model}}<tr><td>Model</td><td>{{.}}</td></tr>{{end}}
{{if .R.Children}}<tr><td>Spawned</td><td>{{len .R.Children}} children (below)</td></tr>{{end}}
<tr><td>Tenant</td><td>{{.R.Tenant}}</td></tr>
<tr><td>Registry</td><td>{{.R.Registry}}</td></tr>
<tr><td>Received</td><td>{{.R.Timing.Received.Format "2006-01-02 15:04:05.000 MST"}}</td></tr>
<tr><td>Duration</td><td>{{printf "%.1f" .R.Timing.DurationMs}} ms</td></tr>
<tr><td>Capabilities</td><td>{{if .R.Grants.Capabilities}}{{range $i, $c := .R.Grants.Capabilities}}{{if $i}}, {{end}}{{$c}}{{end}}{{else}}none{{end}}</td></tr>
{{if .R.Grants.Providers}}<tr><td>Providers</td><td>{{range $p, $tools := .R.Grants.Providers}}{{$p}}: {{range $i, $t := $tools}}{{if $i}}, {{end}}{{$t}}{{end}}; {{end}}</td></tr>{{end}}
{{if .R.Grants.Outbound}}<tr><td>Outbound</td><td>{{range $i, $h := .R.Grants.Outbound}}{{if $i}}, {{end}}{{$h}}{{end}}</td></tr>{{end}}
{{if .R.Grants.OutboundHeaders}}<tr><td>Outbound headers</td><td>{{range $h, $hs := .R.Grants.OutboundHeaders}}{{$h}}: {{range $n, $v := $hs}}{{$n}}: {{$v}}; {{end}}{{end}} (secrets as their names)</td></tr>{{end}}
{{if .R.Grants.EnvKeys}}<tr><td>Env keys</td><td>{{range $i, $k := .R.Grants.EnvKeys}}{{if $i}}, {{end}}{{$k}}{{end}} (values are never kept)</td></tr>{{end}}
{{if .R.Outcome.Denials}}<tr><td>Denied</td><td>{{range $i, $d := .R.Outcome.Denials}}{{if $i}}, {{end}}{{$d}}{{end}}</td></tr>{{end}}
{{if .R.Truncated}}<tr><td>Truncated</td><td>{{range $i, $t := .R.Truncated}}{{if $i}}, {{end}}{{$t}}{{end}}</td></tr>{{end}}
</table>
{{if .R.Outcome.Result}}<h2>Result</h2><pre>{{pretty .R.Outcome.Result}}</pre>{{end}}
{{with .R.Prompt}}<h2>Prompt</h2><pre>{{.}}</pre>{{end}}
{{range $i, $s := .R.Steps}}<section class="step"><h2>Step {{inc $i}}: {{$s.Name}} <small class="{{$s.Outcome.Status}}">{{$s.Outcome.Status}}</small></h2>
<table class="meta"><tr><td>Duration</td><td>{{printf "%.1f" $s.DurationMs}} ms</td></tr>
{{if $s.Outcome.Denials}}<tr><td>Denied</td><td>{{range $j, $d := $s.Outcome.Denials}}{{if $j}}, {{end}}{{$d}}{{end}}</td></tr>{{end}}</table>
<h3>Code</h3><ol class="code">{{range lines $s.Code}}<li>{{.}}</li>{{end}}</ol>
<h3>Input</h3><pre>{{pretty $s.Input}}</pre>
{{with $s.Outcome.Error}}<h3>Error</h3><pre class="error">{{.Code}}: {{.Message}}</pre>{{else}}<h3>Output</h3><pre>{{if $s.Outcome.Result}}{{pretty $s.Outcome.Result}}{{else}}undefined{{end}}</pre>{{end}}
<h3>Logs</h3>{{if $s.Logs}}<ul class="logs">{{range $s.Logs}}<li>{{.}}</li>{{end}}</ul>{{else}}<p>No console output.</p>{{end}}
</section>
{{end}}
{{if not .R.Steps}}<h2>Code</h2>
<ol class="code">{{range lines .R.Code}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{range $name := sortedKeys .R.Modules}}<h2>Module {{$name}}</h2><ol class="code">{{range lines (index $.R.Modules $name)}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{if .R.Children}}<h2>Spawned</h2><table class="children"><tr><th>#</th><th>Depth</th><th>Outcome</th><th>Duration</th></tr>
{{range $i, $c := .R.Children}}<tr><td>{{inc $i}}</td><td>{{$c.Depth}}</td><td class="{{if eq $c.Outcome "ok"}}ok{{else}}error{{end}}">{{$c.Outcome}}</td><td>{{printf "%.1f" $c.DurationMs}} ms</td></tr>
{{end}}</table>{{end}}
<h2>Logs</h2>
{{with runLogs .R}}<ul class="logs">{{range .}}<li>{{with .From}}<span class="from">[{{.}}]</span> {{end}}{{.Line}}</li>{{end}}</ul>{{else}}<p>No console output.</p>{{end}}
</body>
</html>
`))

// failedStep names a chain's failed step as `N "name"` ("" when no step
// failed): the run's outcome then points at it instead of repeating its
// text.
func failedStep(r Receipt) string {
	for i, s := range r.Steps {
		if s.Outcome.Status == "error" {
			return fmt.Sprintf("%d %q", i+1, s.Name)
		}
	}
	return ""
}

// logLine is one line of a run's logs and, for a chain, its step.
type logLine struct{ From, Line string }

// runLogs is the run's console output: a chain's is its steps', each line
// labeled with its step.
func runLogs(r Receipt) []logLine {
	var out []logLine
	for _, l := range r.Logs {
		out = append(out, logLine{Line: l})
	}
	for i, s := range r.Steps {
		from := s.Name
		if from == "" {
			from = fmt.Sprintf("step %d", i+1)
		}
		for _, l := range s.Logs {
			out = append(out, logLine{From: from, Line: l})
		}
	}
	return out
}

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
