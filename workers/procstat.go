package workers

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"
)

// procStat is a worker's /proc/<pid>/stat kept open: the CPU balance reads
// every worker that worked twice a second (cpus.go) and the kill clock
// reads it at a bound (killclock.go). os.ReadFile opened, stat'ed, read
// twice and closed the file at each read, ~13 µs against ~4 for one pread
// of the open file (a Go benchmark on the 2-core machine), and at 200
// tenants' load those reads were ~2% of the gateway's CPU samples,
// growing with the workers (docs/performance.md, "The gateway's CPU with
// many workers"). The open file names the process itself, not its pid:
// once the process is reaped, a read fails (-1, as a file gone did)
// instead of reading whatever took the pid next.
type procStat struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

// cpu is processCPU of pid through the kept file.
func (s *procStat) cpu(pid int) int64 {
	s.mu.Lock()
	if s.f == nil && !s.closed {
		s.f, _ = os.Open(fmt.Sprintf("/proc/%d/stat", pid))
	}
	f := s.f
	s.mu.Unlock()
	if f == nil {
		return -1
	}
	// A stat line is ~300 bytes; its longest (a 64-byte name and every
	// number at its widest) stays under 1 KiB.
	var buf [1024]byte
	n, err := f.ReadAt(buf[:], 0)
	if n == 0 || n == len(buf) || err != nil && n == 0 {
		return -1
	}
	return statCPU(buf[:n])
}

// close closes the kept file: the process was reaped.
func (s *procStat) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// statCPU is utime + stime of a /proc/<pid>/stat line in ns, or -1. The
// fields after the command name, which may hold spaces and parentheses:
// utime and stime are the 14th and 15th of the line, the 12th and 13th
// after the name's last ')'.
func statCPU(data []byte) int64 {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return -1
	}
	var sum int64
	field := 0
	for rest := data[i+1:]; field < 13; {
		for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\n') {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return -1
		}
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		if field == 11 || field == 12 {
			v, ok := decimal(rest[:end])
			if !ok {
				return -1
			}
			sum += v
		}
		rest = rest[end:]
		field++
	}
	return sum * int64(time.Second) / clockTicks
}

// decimal parses a non-negative decimal number.
func decimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}
