package caddymodule

import (
	"encoding/json"
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
	if f.Code == fault.Unauthenticated && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", `Bearer realm="retainer"`)
	}
	w.WriteHeader(f.HTTPStatus())
	json.NewEncoder(w).Encode(env)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
