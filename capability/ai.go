package capability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// AIConfig is a registry's `ai` block (docs/ai.md): an OpenAI-compatible
// chat completions endpoint, its key and the models tenants may name.
type AIConfig struct {
	// Endpoint is the base URL (…/v1) or the chat completions URL itself.
	Endpoint string
	// APIKey goes upstream as a bearer token; never to a program, a
	// receipt or a log.
	APIKey string
	// Models maps the names programs use to the upstream's model names.
	Models map[string]string
	// Timeout bounds one call (a stream's whole answer). Default 60s.
	Timeout time.Duration
}

// url is where chat completions are POSTed.
func (c *AIConfig) url() string {
	e := strings.TrimSuffix(c.Endpoint, "/")
	if strings.HasSuffix(e, "/chat/completions") {
		return e
	}
	return e + "/chat/completions"
}

func (c *AIConfig) names() string {
	names := make([]string, 0, len(c.Models))
	for n := range c.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// AI serves ai.run (docs/ai.md) for each registry's `ai` block, and counts
// the tokens each tenant spends. Safe for concurrent use.
type AI struct {
	mu      sync.Mutex
	configs map[string]*AIConfig // by registry
	tokens  sync.Map             // tenant → *atomic.Int64
	// Client makes the upstream requests (nil: a client of its own, at
	// most budgets.AICalls connections to the endpoint). Redirects are
	// never followed, whatever the client says: the key stays with the
	// endpoint named in the Caddyfile.
	Client *http.Client
	// OnTokens, if set, hears each call's tokens (metrics).
	OnTokens func(registry, tenant string, n int64)

	once     sync.Once
	upstream *http.Client
	// Calls in flight to the endpoints (budgets.AICallsPerTenant,
	// budgets.AICalls): inFlight by tenant, total in all; changed is
	// closed (and forgotten) when one ends.
	slots    sync.Mutex
	inFlight map[string]int
	total    int
	changed  chan struct{}
}

// Budgets (docs/ai.md): calls in flight to the model endpoint,
// budgets.AICallsPerTenant a tenant's below budgets.AICalls the gateway's.
// A tenant's calls past its cap wait for one of its own to end (within the
// run's or invocation's bound), so a tenant that asks for thousands at
// once holds 16 of the endpoint's attention and none of the others'; past
// the gateway's cap a call is OVERLOADED at once.

// take holds a place for one of tenant's calls; release gives it back.
func (a *AI) take(ctx context.Context, tenant string) (release func(), err error) {
	a.slots.Lock()
	defer a.slots.Unlock()
	if a.inFlight == nil {
		a.inFlight = map[string]int{}
	}
	for a.inFlight[tenant] >= budgets.AICallsPerTenant {
		if a.changed == nil {
			a.changed = make(chan struct{})
		}
		changed := a.changed
		a.slots.Unlock()
		select {
		case <-changed:
			a.slots.Lock()
		case <-ctx.Done():
			a.slots.Lock()
			return nil, fault.New(fault.QuotaExceeded, "ai.run: the tenant has %d model calls in flight, the most it may; this one waited for one of them to end until its run ended.", budgets.AICallsPerTenant)
		}
	}
	if a.total >= budgets.AICalls {
		return nil, fault.New(fault.Overloaded, "ai.run: the gateway has as many model calls in flight as it may (%d); try again shortly.", budgets.AICalls)
	}
	a.inFlight[tenant]++
	a.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.slots.Lock()
			if a.inFlight[tenant]--; a.inFlight[tenant] <= 0 {
				delete(a.inFlight, tenant)
			}
			a.total--
			if a.changed != nil {
				close(a.changed)
				a.changed = nil
			}
			a.slots.Unlock()
		})
	}, nil
}

// InFlight answers tenant's calls in flight, and all of them (tests).
func (a *AI) InFlight(tenant string) (int, int) {
	a.slots.Lock()
	defer a.slots.Unlock()
	return a.inFlight[tenant], a.total
}

// Set sets (nil: removes) a registry's ai block.
func (a *AI) Set(registry string, cfg *AIConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.configs == nil {
		a.configs = map[string]*AIConfig{}
	}
	if cfg == nil {
		delete(a.configs, registry)
		return
	}
	a.configs[registry] = cfg
}

func (a *AI) config(registry string) *AIConfig {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.configs[registry]
}

// Tokens answers the tokens (prompt and completion) tenant has spent
// through ai.run since the gateway started.
func (a *AI) Tokens(tenant string) int64 {
	if v, ok := a.tokens.Load(tenant); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (a *AI) count(registry, tenant string, u aiUsage) {
	n := int64(u.PromptTokens + u.CompletionTokens)
	if n <= 0 {
		return
	}
	v, _ := a.tokens.LoadOrStore(tenant, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
	if a.OnTokens != nil {
		a.OnTokens(registry, tenant, n)
	}
}

type aiMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type aiArgs struct {
	Model  string `json:"model"`
	Inputs struct {
		Messages    []aiMessage `json:"messages"`
		Prompt      *string     `json:"prompt"`
		MaxTokens   *int        `json:"max_tokens"`
		Temperature *float64    `json:"temperature"`
		Stream      bool        `json:"stream"`
	} `json:"inputs"`
}

type aiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// client is the upstream client: Client, or one of its own whose
// transport opens at most budgets.AICalls connections to a host; neither
// follows a redirect (docs/ai.md): Go's client keeps Authorization on a
// redirect to the same host name, even on another port or from https to
// http, and the key is for the endpoint alone. A redirect answers the
// program "the model endpoint answered 3xx".
func (a *AI) client() *http.Client {
	a.once.Do(func() {
		c := &http.Client{}
		if a.Client != nil {
			*c = *a.Client
		} else {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxConnsPerHost = budgets.AICalls
			t.MaxIdleConnsPerHost = budgets.AICallsPerTenant
			c.Transport = t
		}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		a.upstream = c
	})
	return a.upstream
}

// run is one ai.run: the answer {response, usage}, or, streamed, a fetch
// stream (fetchstream.go) of Server-Sent Events the program reads or
// returns as a Response body.
func (a *AI) run(ctx context.Context, fs *FetchStreams, c Call) (json.RawMessage, error) {
	cfg := a.config(c.Registry)
	if cfg == nil {
		return nil, fault.New(fault.BadRequest, "ai.run: this registry has no ai block in the Caddyfile (docs/ai.md).")
	}
	var args aiArgs
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return nil, bad("ai.run: malformed arguments.")
	}
	upstream, ok := cfg.Models[args.Model]
	if !ok {
		return nil, fault.New(fault.BadRequest, "ai.run: no model %q; the models are %s.", args.Model, cfg.names())
	}
	in := args.Inputs
	msgs := in.Messages
	switch {
	case in.Prompt != nil && msgs == nil:
		msgs = []aiMessage{{Role: "user", Content: *in.Prompt}}
	case in.Prompt == nil && len(msgs) > 0:
	default:
		return nil, bad("ai.run: the inputs are {messages: [{role, content}]} or {prompt}.")
	}
	body := map[string]any{"model": upstream, "messages": msgs}
	if in.MaxTokens != nil {
		body["max_tokens"] = *in.MaxTokens
	}
	if in.Temperature != nil {
		body["temperature"] = *in.Temperature
	}
	if in.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	payload, _ := json.Marshal(body)
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	// A stream outlives the call (the program reads it, or the gateway
	// relays it, later): its request is bound by the timeout alone.
	parent := ctx
	if in.Stream {
		parent = context.WithoutCancel(ctx)
	}
	reqCtx, cancel := context.WithTimeout(parent, timeout)
	var p *place
	if in.Stream {
		if fs == nil {
			cancel()
			return nil, bad("ai.run: this gateway streams no answers.")
		}
		var err error
		if p, err = fs.reserve(ctx, c.ExecutionID, c.Tenant); err != nil {
			cancel()
			return nil, err
		}
		defer p.done()
	}
	release, err := a.take(ctx, c.Tenant)
	if err != nil {
		cancel()
		return nil, err
	}
	// The place is the call's until its answer is read, or, streamed,
	// until the relay ends (the upstream request with it).
	streaming := false
	defer func() {
		if !streaming {
			release()
		}
	}()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, cfg.url(), bytes.NewReader(payload))
	if err != nil {
		cancel()
		return nil, fault.New(fault.Internal, "ai.run: the ai endpoint is not a URL.")
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	res, err := a.client().Do(req)
	if err != nil {
		cancel()
		if reqCtx.Err() == context.DeadlineExceeded {
			return nil, fault.New(fault.Timeout, "ai.run: the model did not answer within %v.", timeout)
		}
		return nil, fault.New(fault.BadRequest, "ai.run: the model endpoint could not be reached.")
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		return nil, fault.New(fault.BadRequest, "ai.run: the model endpoint answered %d.", res.StatusCode)
	}
	if in.Stream {
		pr, pw := io.Pipe()
		streaming = true
		go func() {
			defer release()
			a.relaySSE(c.Registry, c.Tenant, res.Body, pw)
		}()
		token := fs.put(p, pr, cancel)
		return wirejson.Marshal(map[string]any{"stream": token})
	}
	defer cancel()
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, budgets.AIAnswerBytes+1))
	if err != nil || len(data) > budgets.AIAnswerBytes {
		return nil, fault.New(fault.BadRequest, "ai.run: the model's answer could not be read.")
	}
	var out struct {
		Choices []struct {
			Message aiMessage `json:"message"`
		} `json:"choices"`
		Usage aiUsage `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return nil, fault.New(fault.BadRequest, "ai.run: the model's answer is not a chat completion.")
	}
	a.count(c.Registry, c.Tenant, out.Usage)
	return wirejson.Marshal(map[string]any{"response": out.Choices[0].Message.Content, "usage": out.Usage})
}

// relaySSE turns the upstream's chat completion chunks into the runtime's
// events: `data: {"response": "..."}` for each piece of text, then
// `data: [DONE]`; the usage the last chunk reports is counted.
func (a *AI) relaySSE(registry, tenant string, up io.ReadCloser, w *io.PipeWriter) {
	defer up.Close()
	sc := bufio.NewScanner(up)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *aiUsage `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		if chunk.Usage != nil {
			a.count(registry, tenant, *chunk.Usage)
		}
		if len(chunk.Choices) == 0 || chunk.Choices[0].Delta.Content == "" {
			continue
		}
		ev, _ := json.Marshal(map[string]string{"response": chunk.Choices[0].Delta.Content})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", ev); err != nil {
			return
		}
	}
	if err := sc.Err(); err != nil {
		w.CloseWithError(err)
		return
	}
	io.WriteString(w, "data: [DONE]\n\n")
	w.Close()
}
