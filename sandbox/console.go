package sandbox

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Log bounds per run (SPEC §3).
const (
	maxLogLines = 1000
	maxLogBytes = 64 << 10
)

// LogEntry is one console call of a retained handler, for the handle's log.
type LogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// logBuffer collects one run's console output within the bounds; past them
// it drops entries and ends with one line that says how many were dropped.
type logBuffer struct {
	lines   []string
	bytes   int
	dropped int
}

func (b *logBuffer) add(msg string) {
	if b.dropped > 0 || len(b.lines) >= maxLogLines-1 || b.bytes+len(msg) > maxLogBytes {
		if b.dropped == 0 && len(b.lines) < maxLogLines-1 && b.bytes < maxLogBytes {
			// Keep what fits of the line that crosses the byte bound.
			room := maxLogBytes - b.bytes
			for room > 0 && !utf8.RuneStart(msg[room]) {
				room--
			}
			b.lines = append(b.lines, msg[:room])
			b.bytes = maxLogBytes
		}
		b.dropped++
		return
	}
	b.lines = append(b.lines, msg)
	b.bytes += len(msg)
}

func (b *logBuffer) result() []string {
	out := b.lines
	if out == nil {
		out = []string{}
	}
	if b.dropped > 0 {
		out = append(out, fmt.Sprintf("[logs truncated: the bound is %d lines or %d KiB per run; %d more entries were dropped]", maxLogLines, maxLogBytes>>10, b.dropped))
	}
	return out
}
