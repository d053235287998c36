package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/retainer-gw/retainer/fault"
)

// errorEnvelope is the answer of every failure (README.md, API).
type errorEnvelope struct {
	Error struct {
		Code      fault.Code `json:"code"`
		Message   string     `json:"message"`
		Retryable bool       `json:"retryable"`
	} `json:"error"`
	ResultID string `json:"resultId,omitempty"`
}

// writeFault answers err with its status and the JSON envelope; retryable
// faults carry Retry-After.
func writeFault(w http.ResponseWriter, err error, resultID string) {
	f := fault.As(err)
	var env errorEnvelope
	env.Error.Code = f.Code
	env.Error.Message = f.Message
	env.Error.Retryable = f.Retryable()
	env.ResultID = resultID
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if f.Retryable() {
		h.Set("Retry-After", strconv.Itoa(1))
	}
	if after, ok := retryAfter(err); ok {
		h.Set("Retry-After", after) // a plan's cut: until the UTC day ends
	}
	if f.Code == fault.Unauthenticated && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", `Bearer realm="retainer"`)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(f.HTTPStatus())
	encodeJSON(w, env)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	encodeJSON(w, v)
}

// encodeJSON writes v without HTML escaping: encoding/json would make six
// bytes of every '<', '>' and '&' (a result of 3 MB of '<' answered 18 MB,
// past every bound measured before it). The answers are application/json
// with nosniff, never embedded in a page, so nothing needs the escaping.
func encodeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}
