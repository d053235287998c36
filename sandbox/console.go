package sandbox

import (
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/program"
)

// Output bounds (README.md, Caddyfile) are budgets' rows (budgets.LogBytes
// and the rest), all measured in the bytes that cross the worker boundary,
// after JSON encoding (wirejson), so that no program can make its worker
// send a frame the gateway must refuse.

// hostArgsBound is the bound of one host call's encoded arguments.
func hostArgsBound(op string, maxRequestBody int) (int, string) {
	switch op {
	case "fetch":
		return budgets.HostArgsBytes(maxRequestBody), fmt.Sprintf("fetch: the request body is over its %d byte bound.", maxRequestBody)
	case "tool":
		return budgets.ToolArgsBytes, "The tool's arguments are over their 1 MiB bound."
	case "sql":
		return budgets.KVArgsBytes, "db: the SQL and its values are over their 1 MiB bound."
	case "objects.put", "objects.write":
		return budgets.KVArgsBytes, "bucket.put: a call's part of the value is over its 1 MiB bound."
	default:
		return budgets.KVArgsBytes, "kv: the key and value are over their 1 MiB bound."
	}
}

// logBuffer collects the console output of one bounded activity within the
// bounds; past them it drops entries and ends with one line that says how
// many were dropped.
type logBuffer struct {
	entries []program.LogEntry
	bytes   int
	dropped int
}

// add keeps an entry if it fits, cutting the line that crosses the byte
// bound; it answers false once entries are being dropped.
func (b *logBuffer) add(level, msg string) bool {
	if b.dropped > 0 || len(b.entries) >= budgets.LogLines-1 || b.bytes >= budgets.LogBytes {
		b.dropped++
		return false
	}
	n := wirejson.StringLen(msg)
	if b.bytes+n > budgets.LogBytes {
		msg, _ = wirejson.Cut(msg, budgets.LogBytes-b.bytes)
		n = budgets.LogBytes
		b.dropped++ // what was cut counts as dropped: the note follows
	}
	b.entries = append(b.entries, program.LogEntry{Time: time.Now(), Level: level, Message: msg})
	b.bytes += n
	return true
}

func (b *logBuffer) note() string {
	return fmt.Sprintf("[logs truncated: the bound is %d lines or %d KiB per run, invocation or timer callback; %d more entries were dropped or cut]", budgets.LogLines, budgets.LogBytes>>10, b.dropped)
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
func (b *logBuffer) logEntries() []program.LogEntry {
	out := b.entries
	if b.dropped > 0 {
		out = append(out, program.LogEntry{Time: time.Now(), Level: "warn", Message: b.note()})
	}
	return out
}

// cutThrown bounds a thrown text (README.md, Caddyfile: 64 KiB encoded).
func cutThrown(s string) string {
	if cut, ok := wirejson.Cut(s, budgets.ThrownBytes-64); ok {
		return cut + " [cut at the 64 KiB bound]"
	}
	return s
}
