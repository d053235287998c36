package sandbox

import (
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Output bounds (README.md, Caddyfile), all measured in the bytes that cross the worker
// boundary, after JSON encoding (wirejson), so that no program can make its
// worker send a frame the gateway must refuse.
const (
	maxLogLines = 1000
	// MaxLogBytes bounds the console output of one run, invocation or timer
	// callback, and of one line.
	MaxLogBytes = 64 << 10
	// MaxResultBytes bounds a run's result.
	MaxResultBytes = 8 << 20
	// MaxThrownBytes bounds a thrown text; a longer one is cut.
	MaxThrownBytes = 64 << 10
	// MaxResponseHeadBytes bounds a handler's response headers in all.
	MaxResponseHeadBytes = 64 << 10
	// maxKVArgs and maxToolArgs bound the encoded arguments of a kv call
	// (a 1 MiB value and a 512-byte key) and of a provider tool call.
	maxKVArgs   = 1<<20 + 4<<10
	maxToolArgs = 1<<20 + 4<<10
)

// HostArgsCap is the most a host call's encoded arguments may take, for a
// request-body bound of maxRequestBody (a fetch body is a Latin-1 string:
// at worst six bytes per byte once encoded).
func HostArgsCap(maxRequestBody int) int {
	c := 6*maxRequestBody + 64<<10
	if c < maxKVArgs {
		c = maxKVArgs
	}
	return c
}

// hostArgsBound is the bound of one host call's encoded arguments.
func hostArgsBound(op string, maxRequestBody int) (int, string) {
	switch op {
	case "fetch":
		return HostArgsCap(maxRequestBody), fmt.Sprintf("fetch: the request body is over its %d byte bound.", maxRequestBody)
	case "tool":
		return maxToolArgs, "The tool's arguments are over their 1 MiB bound."
	case "sql":
		return maxKVArgs, "db: the SQL and its values are over their 1 MiB bound."
	case "objects.put", "objects.write":
		return maxKVArgs, "bucket.put: a call's part of the value is over its 1 MiB bound."
	default:
		return maxKVArgs, "kv: the key and value are over their 1 MiB bound."
	}
}

// LogEntry is one console call of a retained handler, for the handle's log.
type LogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// logBuffer collects the console output of one bounded activity within the
// bounds; past them it drops entries and ends with one line that says how
// many were dropped.
type logBuffer struct {
	entries []LogEntry
	bytes   int
	dropped int
}

// add keeps an entry if it fits, cutting the line that crosses the byte
// bound; it answers false once entries are being dropped.
func (b *logBuffer) add(level, msg string) bool {
	if b.dropped > 0 || len(b.entries) >= maxLogLines-1 || b.bytes >= MaxLogBytes {
		b.dropped++
		return false
	}
	n := wirejson.StringLen(msg)
	if b.bytes+n > MaxLogBytes {
		msg, _ = wirejson.Cut(msg, MaxLogBytes-b.bytes)
		n = MaxLogBytes
		b.dropped++ // what was cut counts as dropped: the note follows
	}
	b.entries = append(b.entries, LogEntry{Time: time.Now(), Level: level, Message: msg})
	b.bytes += n
	return true
}

func (b *logBuffer) note() string {
	return fmt.Sprintf("[logs truncated: the bound is %d lines or %d KiB per run, invocation or timer callback; %d more entries were dropped or cut]", maxLogLines, MaxLogBytes>>10, b.dropped)
}

// lines answers the messages, with the truncation note last.
func (b *logBuffer) lines() []string {
	out := make([]string, 0, len(b.entries)+1)
	for _, e := range b.entries {
		out = append(out, e.Message)
	}
	if b.dropped > 0 {
		out = append(out, b.note())
	}
	return out
}

// logEntries answers the entries, with the truncation note last.
func (b *logBuffer) logEntries() []LogEntry {
	out := b.entries
	if b.dropped > 0 {
		out = append(out, LogEntry{Time: time.Now(), Level: "warn", Message: b.note()})
	}
	return out
}

// cutThrown bounds a thrown text (README.md, Caddyfile: 64 KiB encoded).
func cutThrown(s string) string {
	if cut, ok := wirejson.Cut(s, MaxThrownBytes-64); ok {
		return cut + " [cut at the 64 KiB bound]"
	}
	return s
}
