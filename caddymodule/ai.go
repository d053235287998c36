package caddymodule

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/retainer-gw/retainer/capability"
)

// AIConfig is a registry's `ai` block (docs/ai.md): the OpenAI-compatible
// chat completions endpoint behind the ai capability, and the models
// tenants may name.
type AIConfig struct {
	// Endpoint is the base URL (http://127.0.0.1:11434/v1) or the chat
	// completions URL itself. Required.
	Endpoint string `json:"endpoint,omitempty"`
	// APIKey is sent upstream as a bearer token; a placeholder such as
	// {env.AI_API_KEY} is replaced when the config loads. It is never in
	// an isolate, a receipt or a log.
	APIKey string `json:"api_key,omitempty"`
	// Models maps the names programs use to the upstream's model names.
	// At least one.
	Models map[string]string `json:"models,omitempty"`
	// Timeout bounds one call (a streamed answer whole). Default 60s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

func (c *AIConfig) provision() (*capability.AIConfig, error) {
	if !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
		return nil, fmt.Errorf("ai: endpoint %q is not an http(s) URL", c.Endpoint)
	}
	if len(c.Models) == 0 {
		return nil, fmt.Errorf("ai needs at least one model <name> <upstream model>")
	}
	timeout := time.Duration(c.Timeout)
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	return &capability.AIConfig{Endpoint: c.Endpoint, APIKey: caddy.NewReplacer().ReplaceAll(c.APIKey, ""), Models: c.Models, Timeout: timeout}, nil
}

// parseAI reads `ai { endpoint <url>; api_key <key>; model <name>
// [<upstream model>]...; timeout <d> }`.
func parseAI(h *caddyfile.Dispenser) (*AIConfig, error) {
	c := &AIConfig{Models: map[string]string{}}
	for nest := h.Nesting(); h.NextBlock(nest); {
		name := h.Val()
		args := h.RemainingArgs()
		if len(args) == 0 || len(args) > 2 || name != "model" && len(args) != 1 {
			return nil, h.ArgErr()
		}
		switch name {
		case "endpoint":
			c.Endpoint = args[0]
		case "api_key":
			c.APIKey = args[0]
		case "model":
			up := args[0]
			if len(args) == 2 {
				up = args[1]
			}
			c.Models[args[0]] = up
		case "timeout":
			d, err := caddy.ParseDuration(args[0])
			if err != nil {
				return nil, h.Errf("ai timeout: %v", err)
			}
			c.Timeout = caddy.Duration(d)
		default:
			return nil, h.Errf("unknown subdirective %q in ai (want endpoint, api_key, model or timeout)", name)
		}
	}
	return c, nil
}
