package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/retainer-gw/retainer/capability"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/handles"
	"github.com/retainer-gw/retainer/receipts"
)

// GenerateConfig is a registry's model for POST /run/generate (README.md, API): an
// OpenAI-compatible Chat Completions endpoint.
type GenerateConfig struct {
	// Endpoint is the Chat Completions URL, e.g.
	// http://127.0.0.1:11434/v1/chat/completions. Required.
	Endpoint string `json:"endpoint,omitempty"`
	// Model is the model name sent with each request. Required.
	Model string `json:"model,omitempty"`
	// APIKey is sent as a bearer token; a placeholder such as
	// {env.GENERATE_API_KEY} is replaced when the config loads. It is never
	// logged, stored or put in a receipt.
	APIKey string `json:"api_key,omitempty"`
	// System is a file whose text replaces the built-in system prompt's
	// opening (the description of the granted capabilities is appended).
	System string `json:"system,omitempty"`
	// Timeout bounds the model's answer (not the run's bound). Default 60s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	apiKey string
	system string
}

func (g *GenerateConfig) provision() error {
	if g.Endpoint == "" || g.Model == "" {
		return fmt.Errorf("generate needs an endpoint and a model")
	}
	if !strings.HasPrefix(g.Endpoint, "http://") && !strings.HasPrefix(g.Endpoint, "https://") {
		return fmt.Errorf("generate: endpoint %q is not an http(s) URL", g.Endpoint)
	}
	g.apiKey = caddy.NewReplacer().ReplaceAll(g.APIKey, "")
	if g.System != "" {
		data, err := os.ReadFile(g.System)
		if err != nil {
			return fmt.Errorf("generate: reading the system prompt: %w", err)
		}
		g.system = string(data)
	}
	if g.Timeout <= 0 {
		g.Timeout = caddy.Duration(60 * time.Second)
	}
	return nil
}

// generateRequest is the body of POST /run/generate.
type generateRequest struct {
	Prompt       string             `json:"prompt"`
	Capabilities []string           `json:"capabilities,omitempty"`
	Providers    []handles.Provider `json:"providers,omitempty"`
	Outbound     *outboundRequest   `json:"outbound,omitempty"`
	TimeoutMs    *int64             `json:"timeoutMs,omitempty"`
}

func (h *API) runGenerate(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req generateRequest
	c, ok := h.readRun(w, r, &req)
	if !ok {
		return
	}
	g := h.Generate
	if g == nil {
		writeFault(w, fault.New(fault.BadRequest, "This site has no generate block: /run/generate is not configured."), "")
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		writeFault(w, fault.New(fault.BadRequest, "prompt is required."), "")
		return
	}
	run := runRequest{Capabilities: req.Capabilities, Providers: req.Providers, Outbound: req.Outbound, TimeoutMs: req.TimeoutMs}
	// The grants are checked before the model is asked.
	if _, err := h.runExec(bodyCode("return 0"), run); err != nil {
		writeFault(w, err, "")
		return
	}
	code, err := g.ask(r.Context(), systemPrompt(g.system, run), req.Prompt)
	if err != nil {
		writeFault(w, err, "")
		return
	}
	run.Body = code
	h.runBody(w, r, c, "generate", run, received, func(rc *receipts.Receipt) {
		rc.Prompt = req.Prompt
		rc.Model = g.Model
	})
}

// ask calls the model and answers the code in its reply: the first fenced
// code block, else the whole text.
func (g *GenerateConfig) ask(ctx context.Context, system, prompt string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(g.Timeout))
	defer cancel()
	body, _ := json.Marshal(map[string]any{
		"model": g.Model,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": prompt},
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.Endpoint, bytes.NewReader(body))
	if err != nil {
		return "", fault.New(fault.BadResponse, "The model endpoint could not be called.")
	}
	req.Header.Set("Content-Type", "application/json")
	if g.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+g.apiKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fault.New(fault.BadResponse, "The model did not answer within its %v timeout.", time.Duration(g.Timeout))
		}
		return "", fault.New(fault.BadResponse, "The model endpoint could not be reached.")
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return "", fault.New(fault.BadResponse, "The model's answer could not be read.")
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return "", fault.New(fault.BadResponse, "The model endpoint answered status %d.", res.StatusCode)
	}
	var answer struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &answer); err != nil || len(answer.Choices) == 0 {
		return "", fault.New(fault.BadResponse, "The model endpoint answered outside the Chat Completions shape.")
	}
	code := extractCode(answer.Choices[0].Message.Content)
	if strings.TrimSpace(code) == "" {
		return "", fault.New(fault.BadRequest, "The model answered no code.")
	}
	return code, nil
}

// fence is a Markdown fenced code block with an optional language.
var fence = regexp.MustCompile("(?s)```[A-Za-z0-9_+-]*[ \t]*\r?\n(.*?)```")

func extractCode(text string) string {
	if m := fence.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return text
}

// systemPrompt describes the runtime and what is actually granted.
func systemPrompt(opening string, run runRequest) string {
	var b strings.Builder
	if opening != "" {
		b.WriteString(strings.TrimSpace(opening))
	} else {
		b.WriteString(`You write the body of an async JavaScript function that runs once in a sandboxed V8 isolate and returns its result (JSON-serializable).
Answer with one fenced code block holding only the function body (statements ending in a return), no explanation.
The runtime has the web platform's standard library: fetch-style Request/Response/Headers, URL, URLSearchParams, TextEncoder/TextDecoder, atob/btoa, structuredClone, setTimeout, console, crypto (getRandomValues, randomUUID, subtle.digest, HMAC), AbortController, Blob, ReadableStream. There is no require, no process, no file system and no network unless granted below.`)
	}
	b.WriteString("\n\nGranted:")
	caps := append([]string(nil), run.Capabilities...)
	sort.Strings(caps)
	granted := false
	for _, c := range caps {
		switch c {
		case capability.KVRead:
			b.WriteString("\n- kv.get(key) → string or null; kv.list({prefix, limit, cursor}) → {keys, cursor}: a key-value store private to the caller.")
		case capability.KVWrite:
			b.WriteString("\n- kv.put(key, stringValue), kv.delete(key).")
		case capability.SQLRead:
			b.WriteString("\n- db: a SQLite database private to the caller, with Cloudflare D1's API: await db.prepare(sql).bind(...values).all() → {results, meta}, .first(column?), .raw(), db.batch([statements]); reading statements only.")
		case capability.SQLWrite:
			b.WriteString("\n- db: a SQLite database private to the caller, with Cloudflare D1's API: await db.prepare(sql).bind(...values).run() / .all() / .first(), db.batch([statements]) (one transaction), db.exec(sql); no BEGIN/COMMIT (use batch).")
		case capability.ObjectsRead:
			b.WriteString("\n- bucket: objects private to the caller, with Cloudflare R2's API: await bucket.get(key, {range?}) → null or an object with body (a ReadableStream), text(), json(), arrayBuffer(), size, etag, httpMetadata; bucket.head(key); bucket.list({prefix, delimiter, cursor, limit}) → {objects, truncated, cursor, delimitedPrefixes} (also env.bucket).")
		case capability.ObjectsWrite:
			b.WriteString("\n- bucket.put(key, string | ArrayBuffer | ReadableStream (a request body streams), {httpMetadata?, customMetadata?}) → the object; bucket.delete(key | [keys]).")
		case capability.AIRun:
			b.WriteString("\n- ai.run(model, {messages: [{role, content}]} or {prompt}, with max_tokens?, temperature?) → {response, usage}; with stream: true a ReadableStream of Server-Sent Events (data: {\"response\": ...} … data: [DONE]) a handler can return as a Response body (also env.ai).")
		case capability.Fetch:
			hosts := "no host"
			if run.Outbound != nil && len(run.Outbound.Allow) > 0 {
				hosts = strings.Join(run.Outbound.Allow, ", ")
			}
			b.WriteString("\n- fetch(url, init) to these hosts only: " + hosts + ".")
		case capability.Spawn:
			b.WriteString("\n- await spawn(body, capabilities): runs another function body in a fresh isolate and answers its result; use it with Promise.all to fan out.")
		}
		granted = true
	}
	for _, p := range run.Providers {
		for _, t := range p.Tools {
			b.WriteString(fmt.Sprintf("\n- await %s.%s(args) → JSON: a tool of the caller.", p.Name, t))
			granted = true
		}
	}
	if !granted {
		b.WriteString(" nothing beyond the standard library.")
	}
	return b.String()
}
