package capability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/retainer-gw/retainer/fault"
)

// Tools calls provider tools: each is an upstream URL that receives the
// program's arguments as a JSON POST and answers JSON.
type Tools struct {
	// Client makes the calls. Default: no proxy, 30s timeout.
	Client *http.Client
	// MaxAnswer bounds an answer. Default 8 MiB.
	MaxAnswer int64
}

// Call POSTs args to upstream for the given execution and tenant.
func (t *Tools) Call(ctx context.Context, upstream, executionID, tenant string, args json.RawMessage) (json.RawMessage, error) {
	client := t.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	max := t.MaxAnswer
	if max <= 0 {
		max = 8 << 20
	}
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstream, bytes.NewReader(args))
	if err != nil {
		return nil, fault.New(fault.BadRequest, "The tool's upstream URL is not valid.")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Retainer-Execution-Id", executionID)
	req.Header.Set("X-Retainer-Tenant", tenant)
	res, err := client.Do(req)
	if err != nil {
		return nil, fault.New(fault.BadRequest, "The tool's upstream did not answer.")
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, max+1))
	if err != nil || int64(len(data)) > max {
		return nil, fault.New(fault.BadRequest, "The tool's answer could not be read within %d bytes.", max)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return nil, fault.New(fault.BadRequest, "The tool answered status %d.", res.StatusCode)
	}
	if !json.Valid(data) {
		return nil, fault.New(fault.BadRequest, "The tool did not answer JSON.")
	}
	return data, nil
}
