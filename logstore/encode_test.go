package logstore

import (
	"math"
	"testing"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

// marshalStored is what encodeStored wrote before it was written by hand:
// stored entries keep these bytes (their sizes count against log_bytes).
func marshalStored(e Entry) ([]byte, error) {
	return wirejson.Marshal(struct {
		Level        string  `json:"level"`
		Message      string  `json:"message,omitempty"`
		Method       string  `json:"method,omitempty"`
		URL          string  `json:"url,omitempty"`
		Status       int     `json:"status,omitempty"`
		DurationMs   float64 `json:"durationMs,omitempty"`
		CPUMs        float64 `json:"cpuMs,omitempty"`
		URLTruncated bool    `json:"urlTruncated,omitempty"`
	}{e.Level, e.Message, e.Method, e.URL, e.Status, e.DurationMs, e.CPUMs, e.URLTruncated})
}

func TestEncodeStoredMatchesMarshal(t *testing.T) {
	entries := []Entry{
		{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42&sort=asc", Status: 200, DurationMs: 0.123, CPUMs: 0.05},
		{Level: "request", Method: "POST", URL: "http://h/\"quoted\"\n<tag>\u2028\xff", Status: 599, DurationMs: 1e-7, CPUMs: 3e21, URLTruncated: true},
		{Level: "request"},
		{Level: ""},
		{Level: "log", Message: "hello \x00 world é漢🙂"},
		{Level: "error", Message: "x", Status: -1, DurationMs: math.Copysign(0, -1)},
		{Level: "system", Message: "a", Method: "M", DurationMs: 12345678.9},
	}
	for _, e := range entries {
		want, err := marshalStored(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeStored(e)
		if err != nil || string(got) != string(want) {
			t.Errorf("encodeStored(%+v) = %s, %v; Marshal %s", e, got, err, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := encodeStored(Entry{Level: "request", DurationMs: 1, CPUMs: f}); err == nil {
			t.Errorf("encodeStored took cpuMs %v, which Marshal refuses", f)
		}
		if _, err := encodeStored(Entry{Level: "request", DurationMs: f}); err == nil {
			t.Errorf("encodeStored took durationMs %v, which Marshal refuses", f)
		}
	}
}

func BenchmarkEncodeStored(b *testing.B) {
	e := Entry{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42&sort=asc", Status: 200, DurationMs: 0.123, CPUMs: 0.05}
	for b.Loop() {
		encodeStored(e)
	}
}

func BenchmarkMarshalStored(b *testing.B) {
	e := Entry{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42&sort=asc", Status: 200, DurationMs: 0.123, CPUMs: 0.05}
	for b.Loop() {
		marshalStored(e)
	}
}
