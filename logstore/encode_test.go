package logstore

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/store"

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

// Entries written into a page read back as they were, whatever their
// fields, levels and bytes, in order, with their times (a late one keeps
// its time, placed after the newer one), a page placed after a handle's
// last stored entry too; the entries JSON cannot hold are refused.
func TestPageRoundTrip(t *testing.T) {
	base := time.Date(2026, 12, 6, 3, 31, 2, 418_000_000, time.UTC)
	entries := []Entry{
		{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42&sort=asc", Status: 200, DurationMs: 0.123, CPUMs: 0.05},
		{Level: "request", Method: "POST", URL: "http://h/\"quoted\"\n<tag>\u2028\xff", Status: 599, DurationMs: 1e-7, CPUMs: 3e21, URLTruncated: true},
		{Level: "request"},
		{Level: ""},
		{Level: "log", Message: "hello \x00 world é漢🙂"},
		{Level: "error", Message: "x", Status: -1, DurationMs: math.Copysign(0, -1)},
		{Level: "system", Message: "a", Method: "M", DurationMs: 12345678.9},
		{Level: "custom-level", Message: strings.Repeat("<", 20000)},
		{Level: "warn", Message: "late"}, // written after a newer entry
		{Level: "request", Method: "GET", URL: "/", Status: 404},
	}
	for i := range entries {
		entries[i].Time = base.Add(time.Duration(i) * time.Millisecond)
	}
	entries[8].Time = base.Add(-time.Hour)
	for _, after := range []uint64{0, unixNano(base.Add(time.Hour))} {
		p := &page{}
		for i := range entries {
			e := entries[i]
			p.add(&e, unixNano(e.Time), uint32(math.MaxUint32-3+i)) // the sequence wraps
		}
		if after != 0 {
			p = p.after(key{after, 7})
			if !(key{after, 7}).less(p.first) {
				t.Fatalf("a page placed after %d starts at %v", after, p.first)
			}
		}
		k := append(lp(lp(nil, "t"), "h"), p.first.bytes()...)
		r, err := openPage(k, len(k)-12, p.value())
		if err != nil {
			t.Fatal(err)
		}
		var last key
		for i := 0; ; i++ {
			ek, when, body, ok := r.next()
			if !ok {
				if i != len(entries) {
					t.Fatalf("after %d: %d entries read of %d", after, i, len(entries))
				}
				break
			}
			if i > 0 && !last.less(ek) {
				t.Fatalf("after %d: entry %d's key %v is not after %v", after, i, ek, last)
			}
			last = ek
			got, want := decodeBody(body, when), entries[i]
			if !got.Time.Equal(want.Time) {
				t.Fatalf("after %d: entry %d at %v, want %v", after, i, got.Time, want.Time)
			}
			got.Time = want.Time
			if math.Signbit(want.DurationMs) {
				want.DurationMs = 0 // JSON omits it either way
			}
			gj, _ := got.MarshalJSON()
			wj, _ := want.MarshalJSON()
			if string(gj) != string(wj) {
				t.Fatalf("after %d: entry %d reads %s, was %s", after, i, gj, wj)
			}
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1)} {
		if validEntry(&Entry{Level: "request", DurationMs: 1, CPUMs: f}) == nil || validEntry(&Entry{Level: "request", DurationMs: f}) == nil {
			t.Errorf("a duration of %v was taken, which JSON refuses", f)
		}
	}
}

// BenchmarkAppend is a request entry's cost on the request's path.
func BenchmarkAppend(b *testing.B) {
	s := newStore(nil, 0, 0, nil)
	e := Entry{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42&sort=asc", Status: 200, DurationMs: 0.123, CPUMs: 0.05}
	for i := 0; b.Loop(); i++ {
		s.Append("bench\x00tenant", "handle", e)
		if i%256 == 255 {
			s.mu.Lock()
			clear(s.pending)
			s.pendingBytes, s.pendingCount = 0, 0
			clear(s.tenantPending)
			s.mu.Unlock()
		}
	}
}

// BenchmarkCommit is the writer's commit of a busy handle's 330 request
// entries (20 ms of 16,500 requests a second) to bbolt: its time, and the
// bytes the process wrote to disk an entry (/proc/self/io).
func BenchmarkCommit(b *testing.B) {
	st, err := store.OpenBolt(filepath.Join(b.TempDir(), "s.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s := newStore(st, 0, 0, nil)
	e := Entry{Level: "request", Method: "GET", URL: "http://x.apps.localhost/items?id=42", Status: 200, DurationMs: 0.123, CPUMs: 0.05}
	w0, n := writeBytes(), 0
	for b.Loop() {
		for i := 0; i < 330; i++ {
			s.Append("apps\x00tenant", "0123456789abcdef0123", e)
		}
		s.Flush()
		n += 330
	}
	b.ReportMetric(float64(writeBytes()-w0)/float64(n), "written-B/entry")
}

// writeBytes is what the process wrote to storage.
func writeBytes() int64 {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
