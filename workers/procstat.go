package workers

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// procStat is a worker's /proc/<pid>/stat and statm kept open: the CPU
// balance reads the stat of every worker that worked twice a second
// (cpus.go), the kill clock at a bound (killclock.go), and the memory
// turns follow a worker that worked through its statm (memory.go).
// os.ReadFile opened, stat'ed, read twice and closed the file at each
// read, ~13 µs against ~4 for one pread of the open file (a Go benchmark
// on the 2-core machine), and at 200 tenants' load those reads were ~2.5%
// of the gateway's CPU samples, growing with the workers
// (docs/performance.md, "The gateway's CPU with many workers"). An open
// file names the process itself, not its pid: once the process is
// reaped, a read fails (as a file gone did) instead of reading whatever
// took the pid next.
type procStat struct {
	mu          sync.Mutex
	stat, statm *os.File
	closed      bool
}

// cpu is a process's CPU time so far in ns (user and system, from its
// kept /proc/<pid>/stat), or -1 when it cannot be read.
func (s *procStat) cpu(pid int) int64 {
	// A stat line is ~300 bytes; its longest (a 64-byte name and every
	// number at its widest) stays under 1 KiB.
	var buf [1024]byte
	n := s.read(&s.stat, pid, "stat", buf[:])
	if n <= 0 {
		return -1
	}
	return statCPU(buf[:n])
}

// memory is a process's resident anonymous and file-or-shmem memory
// (bytes) from its kept /proc/<pid>/statm: the kernel's counters, no walk
// of the page tables. A worker's anonymous pages are its own (it was
// exec'd: it shares none with the gateway), so what its anonymous memory
// moves by is what its PSS and private memory move by; the shared part is
// what smaps_rollup must apportion.
func (s *procStat) memory(pid int) (anon, shared int64, ok bool) {
	var buf [256]byte // seven numbers
	n := s.read(&s.statm, pid, "statm", buf[:])
	if n <= 0 {
		return 0, 0, false
	}
	return parseStatm(buf[:n])
}

// read reads the kept file *f (/proc/<pid>/<name>, opened at its first
// read) whole into buf: its length, or -1 when it cannot be read or does
// not fit.
func (s *procStat) read(f **os.File, pid int, name string, buf []byte) int {
	s.mu.Lock()
	if *f == nil && !s.closed {
		*f, _ = os.Open(fmt.Sprintf("/proc/%d/%s", pid, name))
	}
	file := *f
	s.mu.Unlock()
	if file == nil {
		return -1
	}
	n, err := file.ReadAt(buf, 0)
	if n == 0 || n == len(buf) || err != nil && err != io.EOF {
		return -1
	}
	return n
}

// close closes the kept files: the process was reaped.
func (s *procStat) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, f := range []**os.File{&s.stat, &s.statm} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
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

// parseStatm is memory's answer from a statm line: size resident
// shared text lib data dt, in pages.
func parseStatm(data []byte) (anon, shared int64, ok bool) {
	f := bytes.Fields(data)
	if len(f) < 3 {
		return 0, 0, false
	}
	resident, ok1 := decimal(f[1])
	sharedPages, ok2 := decimal(f[2])
	if !ok1 || !ok2 || sharedPages > resident {
		return 0, 0, false
	}
	page := int64(os.Getpagesize())
	return (resident - sharedPages) * page, sharedPages * page, true
}
