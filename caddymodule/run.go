package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/retainer-gw/retainer/authz"
	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
	"github.com/retainer-gw/retainer/receipts"
)

// The run service of seed 000 (README.md, API): /run with a function body,
// /run/chain of steps that pass their result on, and /run/generate (in
// generate.go). Every run has the tenants, scopes (retainer:execute),
// bounds, grants, errors and receipts of POST /executions, and the spawn
// budget of README.md, API.

// runRequest is the body of POST /run.
type runRequest struct {
	Body          string             `json:"body"`
	Capabilities  []string           `json:"capabilities,omitempty"`
	Providers     []handles.Provider `json:"providers,omitempty"`
	Outbound      *outboundRequest   `json:"outbound,omitempty"`
	Env           map[string]string  `json:"env,omitempty"`
	TimeoutMs     *int64             `json:"timeoutMs,omitempty"`
	MemoryLimitMb *int               `json:"memoryLimitMb,omitempty"`
}

type outboundRequest struct {
	Allow []string `json:"allow"`
}

// bodyCode is a function body run as `async () => { <body> }` (the line
// breaks keep a trailing line comment from eating the brace).
func bodyCode(body string) string { return "async () => {\n" + body + "\n}" }

// chainCode runs a step's body with the global `input` set to the previous
// step's result (JSON is a JavaScript expression).
func chainCode(body string, input json.RawMessage) string {
	return "async () => {\nglobalThis.input = " + string(input) + ";\nreturn (async () => {\n" + body + "\n})();\n}"
}

// Errors count a body's lines from its own first line (docs/runtime.md,
// "Errors"): bodyOrigin and stepOrigin say where it starts in bodyCode and
// chainCode.
var bodyOrigin = &program.Origin{File: "body", Line: 2}

func stepOrigin(i int, name string, input json.RawMessage) *program.Origin {
	file := fmt.Sprintf("step %d", i+1)
	if name != "" {
		file = fmt.Sprintf("step %q", name)
	}
	return &program.Origin{File: file, Line: 4 + strings.Count(string(input), "\n")}
}

// runExec turns a run request into an execution request within the
// config's maxima.
func (h *API) runExec(code string, req runRequest) (handles.ExecRequest, error) {
	var out executionRequest
	out.Code = code
	out.Capabilities = req.Capabilities
	out.Providers = req.Providers
	out.Env = req.Env
	out.TimeoutMs = req.TimeoutMs
	out.MemoryLimitMb = req.MemoryLimitMb
	if req.Outbound != nil {
		out.Outbound = &struct {
			Allow   []string                     `json:"allow"`
			Headers map[string]map[string]string `json:"headers,omitempty"`
		}{Allow: req.Outbound.Allow}
	}
	return h.toRequest(out)
}

func (h *API) spawnDepth() int {
	if h.SpawnDepth > 0 {
		return h.SpawnDepth
	}
	return budgets.DefaultSpawnDepth
}

func (h *API) spawnChildren() int {
	if h.SpawnChildren > 0 {
		return h.SpawnChildren
	}
	return budgets.DefaultSpawnChildren
}

// runAnswer is the 200 answer of /run and /run/generate.
type runAnswer struct {
	Result   json.RawMessage `json:"result,omitempty"`
	Logs     []string        `json:"logs"`
	Code     string          `json:"code,omitempty"`
	ResultID string          `json:"resultId,omitempty"`
}

// answerBudget is what is left of max_response_body for one answer of the
// run service (docs/architecture.md, "Budgets"): the answer holds at most
// that in all, steps' results and logs included. Results and logs are
// charged as they come; one past what is left is cut in the answer with a
// note (the receipt is cut at its own bound), so a chain of 32 steps
// answering 8 MiB each never makes the gateway hold 32 of them. The rest
// of the answer is charged too: its envelope, each step's name and error
// and fields, and room for the notes (a step name of 30 KB once went
// uncounted, 32 of them past the bound).
type answerBudget struct {
	left, bound int64
}

const (
	// answerEnvelope is room for an answer's own fields: its resultId,
	// an error's code and retryable, and the JSON around them.
	answerEnvelope = 512
	// stepFields is room for one step's fields but its name and error
	// message (durationMs, an error's code, the JSON around them) and for
	// the notes that may stand for its result and its logs.
	stepFields = 640
)

func (h *API) answerBudget() *answerBudget {
	return &answerBudget{left: h.app.MaxResponseBody - answerEnvelope, bound: h.app.MaxResponseBody}
}

// text answers s if it fits what is left, charged, else a note naming
// what it was (what, e.g. "step name"), charged against room already
// kept for it.
func (b *answerBudget) text(what, s string) string {
	if n := int64(wirejson.StringLen(s)); n <= b.left {
		b.left -= n
		return s
	}
	return fmt.Sprintf("[%s of %d bytes cut from the answer: it holds at most %d bytes in all (max_response_body)]", what, len(s), b.bound)
}

// charge takes n bytes of what is left (room for fields and notes).
func (b *answerBudget) charge(n int64) { b.left -= n }

// result answers r if it fits what is left, charged, else a note (and
// false).
func (b *answerBudget) result(r json.RawMessage) (json.RawMessage, bool) {
	if int64(len(r)) <= b.left {
		b.left -= int64(len(r))
		return r, true
	}
	return cutResult(len(r), b.bound), false
}

// refund gives back what a result kept in the answer was charged.
func (b *answerBudget) refund(r json.RawMessage) { b.left += int64(len(r)) }

// logs answers the lines that fit what is left, charged, and a note for
// the rest.
func (b *answerBudget) logs(lines []string) []string {
	for i, l := range lines {
		n := int64(wirejson.StringLen(l) + 1)
		if n > b.left {
			return append(lines[:i:i], fmt.Sprintf("[%d log lines cut from the answer: it holds at most %d bytes in all (max_response_body)]", len(lines)-i, b.bound))
		}
		b.left -= n
	}
	return lines
}

// cutResult stands for a result cut from an answer.
func cutResult(n int, bound int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`"[result of %d bytes cut from the answer: it holds at most %d bytes in all (max_response_body)]"`, n, bound))
}

// readRun reads and checks a request body of the run service.
func (h *API) readRun(w http.ResponseWriter, r *http.Request, v any) (caller, bool) {
	c, ok := h.authorize(w, r, authz.ScopeExecute)
	if !ok {
		return c, false
	}
	return c, decodeBody(w, r, h.app.MaxRequestBody, v)
}

func (h *API) run(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req runRequest
	c, ok := h.readRun(w, r, &req)
	if !ok {
		return
	}
	if strings.TrimSpace(req.Body) == "" {
		writeFault(w, fault.New(fault.BadRequest, "body is required: the function body to run."), "")
		return
	}
	h.runBody(w, r, c, "run", req, received, func(rc *receipts.Receipt) {})
}

// runBody runs one function body and answers it, with its receipt
// (extend adds the kind's own fields to it).
func (h *API) runBody(w http.ResponseWriter, r *http.Request, c caller, kind string, req runRequest, received time.Time, extend func(*receipts.Receipt)) {
	code := bodyCode(req.Body)
	ereq, err := h.runExec(code, req)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	ereq.Program.Origin = bodyOrigin
	started := time.Now()
	res, err := h.registry().Execute(r.Context(), c.tenant, ereq)
	ended := time.Now()
	metricExecutions.WithLabelValues(outcomeLabel(err)).Inc()
	rc := h.receipt(c.tenant, executionRequest{Code: code, Env: req.Env}, ereq, res, err, received, started, ended)
	rc.Kind = kind
	rc.Children = children(ereq.Budget)
	extend(&rc)
	resultID := h.putReceipt(rc)
	if err != nil {
		writeFault(w, err, resultID)
		return
	}
	budget := h.answerBudget()
	budget.charge(stepFields) // room for the notes
	ans := runAnswer{Result: res.Outcome.Result, Logs: res.Outcome.Logs, ResultID: resultID}
	if kind == "generate" {
		ans.Code = budget.text("code", req.Body)
	}
	if ans.Result != nil {
		ans.Result, _ = budget.result(ans.Result)
	}
	ans.Logs = budget.logs(ans.Logs)
	if ans.Logs == nil {
		ans.Logs = []string{}
	}
	writeJSON(w, http.StatusOK, ans)
}

func outcomeLabel(err error) string {
	if err != nil {
		return string(fault.CodeOf(err))
	}
	return "ok"
}

func children(b *handles.SpawnBudget) []receipts.Child {
	var out []receipts.Child
	for _, c := range b.Records() {
		out = append(out, receipts.Child{Depth: c.Depth, Outcome: c.Outcome, DurationMs: c.DurationMs})
	}
	return out
}

// chainRequest is the body of POST /run/chain.
type chainRequest struct {
	Steps []chainStep     `json:"steps"`
	Input json.RawMessage `json:"input,omitempty"`
}

type chainStep struct {
	Name         string             `json:"name"`
	Body         string             `json:"body"`
	Capabilities []string           `json:"capabilities,omitempty"`
	Providers    []handles.Provider `json:"providers,omitempty"`
	Outbound     *outboundRequest   `json:"outbound,omitempty"`
}

// stepAnswer is one step that ran, in the chain's answer.
type stepAnswer struct {
	Name       string          `json:"name"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *stepError      `json:"error,omitempty"`
	Logs       []string        `json:"logs"`
	DurationMs float64         `json:"durationMs"`
	cut        bool            // Result is a note: the step's was cut from the answer
}

type stepError struct {
	Code      fault.Code `json:"code"`
	Message   string     `json:"message"`
	Retryable bool       `json:"retryable"`
}

// chainFailure is a failed chain's answer: the failing step's error, and
// every step that ran.
type chainFailure struct {
	errorEnvelope
	Steps []stepAnswer `json:"steps"`
}

func (h *API) runChain(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req chainRequest
	c, ok := h.readRun(w, r, &req)
	if !ok {
		return
	}
	if len(req.Steps) == 0 || len(req.Steps) > budgets.ChainSteps {
		writeFault(w, fault.New(fault.BadRequest, "steps: a chain has 1 to %d steps.", budgets.ChainSteps), "")
		return
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if !json.Valid(input) {
		writeFault(w, fault.New(fault.BadRequest, "input is not JSON."), "")
		return
	}
	// Every step is checked before the first runs.
	execs := make([]handles.ExecRequest, len(req.Steps))
	for i, s := range req.Steps {
		if strings.TrimSpace(s.Body) == "" {
			writeFault(w, fault.New(fault.BadRequest, "steps[%d].body is required.", i), "")
			return
		}
		e, err := h.runExec(chainCode(s.Body, input), runRequest{Capabilities: s.Capabilities, Providers: s.Providers, Outbound: s.Outbound})
		if err != nil {
			writeFault(w, fault.New(fault.BadRequest, "steps[%d]: %s", i, fault.As(err).Message), "")
			return
		}
		execs[i] = e
	}
	// A chain's steps share one spawn budget (docs/architecture.md,
	// "Budgets"): a chain of many steps is not many budgets.
	for i := range execs {
		execs[i].Budget = execs[0].Budget
	}
	recorded := 0 // the shared budget's children already in the receipt
	rc := receipts.Receipt{ID: receipts.NewID(), Tenant: c.tenant, Registry: h.Registry, Kind: "chain", Logs: []string{},
		Grants: receipts.Grants{Capabilities: []string{}, Outbound: []string{}, Providers: map[string][]string{}}}
	steps := []stepAnswer{}
	// Every step's fields and name are charged before the first runs:
	// they come before its result.
	budget := h.answerBudget()
	names := make([]string, len(req.Steps))
	for i, s := range req.Steps {
		budget.charge(stepFields)
		names[i] = budget.text("step name", s.Name)
	}
	var failed error
	started := time.Now()
	for i, s := range req.Steps {
		ereq := execs[i]
		ereq.Program = program.Program{Code: chainCode(s.Body, input), Origin: stepOrigin(i, s.Name, input)}
		stepStart := time.Now()
		res, err := h.registry().Execute(r.Context(), c.tenant, ereq)
		ms := float64(time.Since(stepStart).Microseconds()) / 1000
		logs := res.Outcome.Logs
		if logs == nil {
			logs = []string{}
		}
		step := stepAnswer{Name: names[i], Logs: logs, DurationMs: ms}
		if res.Outcome.Result != nil {
			var kept bool
			step.Result, kept = budget.result(res.Outcome.Result)
			step.cut = !kept
		}
		step.Logs = budget.logs(logs)
		rs := receipts.Step{Name: s.Name, Code: s.Body, Input: input, Logs: logs, DurationMs: ms,
			Grants: receipts.Grants{Capabilities: orEmpty(ereq.Grants.Capabilities), Outbound: orEmpty(ereq.Grants.Outbound), Providers: providerMap(ereq.Grants.Providers)}}
		all := children(ereq.Budget)
		rc.Children = append(rc.Children, all[recorded:]...)
		recorded = len(all)
		if err != nil {
			f := fault.As(err)
			step.Error = &stepError{Code: f.Code, Message: budget.text("error message", f.Message), Retryable: f.Retryable()}
			rs.Outcome = receipts.Outcome{Status: "error", Error: &receipts.Error{Code: string(f.Code), Message: f.Message}}
		} else {
			rs.Outcome = receipts.Outcome{Status: "ok", Result: res.Outcome.Result}
		}
		rs.Outcome.Denials = res.Denials
		steps = append(steps, step)
		rc.AddStep(rs)
		if err != nil {
			failed = err
			break
		}
		input = res.Outcome.Result
		if input == nil {
			input = json.RawMessage("null")
		}
	}
	ended := time.Now()
	rc.Timing = receipts.Timing{Received: received, Started: started, Ended: ended, DurationMs: float64(ended.Sub(started).Microseconds()) / 1000}
	last := rc.Steps[len(rc.Steps)-1]
	rc.Outcome = last.Outcome
	metricExecutions.WithLabelValues(outcomeLabel(failed)).Inc()
	resultID := h.putReceipt(rc)
	if failed != nil {
		f := fault.As(failed)
		var env chainFailure
		env.Error.Code, env.Error.Message, env.Error.Retryable = f.Code, budget.text("error message", f.Message), f.Retryable()
		env.ResultID = resultID
		env.Steps = steps
		if f.Retryable() {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, f.HTTPStatus(), env)
		return
	}
	writeJSON(w, http.StatusOK, chainAnswer{Result: chainResult(budget, steps, input), Steps: steps, ResultID: resultID})
}

// chainResult is a chain's result in its answer, the last step's (input
// holds it whole): it comes before the steps' results, so when it does
// not fit what is left, the last step's copy of it and then the steps'
// results from the first on are cut to make room.
func chainResult(b *answerBudget, steps []stepAnswer, result json.RawMessage) json.RawMessage {
	if len(steps[len(steps)-1].Result) == 0 {
		return nil // the last step answered nothing
	}
	if int64(len(result)) > b.left {
		last := &steps[len(steps)-1]
		if !last.cut {
			b.refund(last.Result)
			last.Result, last.cut = json.RawMessage(`"[the chain's result: see result]"`), true
		}
	}
	for i := 0; int64(len(result)) > b.left && i < len(steps)-1; i++ {
		if r := steps[i].Result; len(r) > 0 && !steps[i].cut {
			b.refund(r)
			steps[i].Result, steps[i].cut = cutResult(len(r), b.bound), true
		}
	}
	r, _ := b.result(result)
	return r
}

// chainAnswer is a chain's 200 answer: the last step's result and every
// step.
type chainAnswer struct {
	Result   json.RawMessage `json:"result,omitempty"`
	Steps    []stepAnswer    `json:"steps"`
	ResultID string          `json:"resultId,omitempty"`
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func providerMap(ps []handles.Provider) map[string][]string {
	m := map[string][]string{}
	for _, p := range ps {
		m[p.Name] = p.Tools
	}
	return m
}
