package workers

import (
	"os"
	"testing"
	"time"
)

// A stat line's CPU times are read after the name's last ')', whatever
// the name holds.
func TestStatCPUReadsPastTheName(t *testing.T) {
	line := "4242 (a ) b (c) d) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 100 1000 200 18446744073709551615\n"
	if got, want := statCPU([]byte(line)), int64(325)*int64(time.Second)/clockTicks; got != want {
		t.Fatalf("statCPU = %d, want %d", got, want)
	}
	if anon, shared, ok := parseStatm([]byte("5000 3000 1000 10 0 2000 0\n")); !ok || anon != 2000*int64(os.Getpagesize()) || shared != 1000*int64(os.Getpagesize()) {
		t.Fatalf("parseStatm = %d %d %v", anon, shared, ok)
	}
	for _, bad := range []string{"", "5000 3000", "5000 1000 3000 0", "5000 -3 0"} {
		if _, _, ok := parseStatm([]byte(bad)); ok {
			t.Errorf("parseStatm(%q) read", bad)
		}
	}
	for _, bad := range []string{"", "4242 no name S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 25a 75 0\n"} {
		if got := statCPU([]byte(bad)); got != -1 {
			t.Errorf("statCPU(%q) = %d, want -1", bad, got)
		}
	}
}

// The kept files read what a fresh read of the files does, move with the
// process's CPU time and memory, and read nothing once closed (the
// process reaped).
func TestProcStatReadsTheKeptFile(t *testing.T) {
	var s procStat
	pid := os.Getpid()
	first := s.cpu(pid)
	if first < 0 {
		t.Fatal("the kept file read nothing")
	}
	fresh := processCPU(pid)
	if fresh < first {
		t.Fatalf("a fresh read %d is behind the kept file's %d", fresh, first)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	if again := s.cpu(pid); again <= first {
		t.Fatalf("after 300 ms of spinning the kept file still reads %d (first %d)", again, first)
	}
	anon, shared, ok := s.memory(pid)
	if !ok || anon <= 0 || shared <= 0 {
		t.Fatalf("the kept statm read anon %d shared %d (%v)", anon, shared, ok)
	}
	grown := make([]byte, 64<<20)
	for i := range grown {
		grown[i] = 1
	}
	if more, _, _ := s.memory(pid); more < anon+32<<20 {
		t.Fatalf("with 64 MiB more touched the kept statm reads %d anonymous bytes (before %d)", more, anon)
	}
	if fresh, _, _ := readStatm(pid); fresh < anon+32<<20 {
		t.Fatalf("a fresh statm reads %d anonymous bytes (before %d)", fresh, anon)
	}
	grown[len(grown)-1] = 2 // kept alive past the reads
	s.close()
	if got := s.cpu(pid); got != -1 {
		t.Fatalf("closed, it read %d", got)
	}
	if _, _, ok := s.memory(pid); ok {
		t.Fatal("closed, its statm read")
	}
}

// The balance, the kill clock and the memory turns read a worker's files
// at once, and its reaping closes them meanwhile: every read answers the
// file's numbers or nothing, never a torn one (run with -race).
func TestProcStatReadAtOnceAndClosed(t *testing.T) {
	var s procStat
	pid := os.Getpid()
	done := make(chan struct{})
	errs := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			defer func() { done <- struct{}{} }()
			closed := false
			for j := 0; j < 200; j++ {
				if i%2 == 0 {
					v := s.cpu(pid)
					if v == -1 {
						closed = true
					} else if v < 0 || closed {
						errs <- "a CPU read of a closed file, or a torn one"
						return
					}
				} else if anon, shared, ok := s.memory(pid); ok && (anon <= 0 || shared <= 0 || closed) {
					errs <- "a statm read of a closed file, or a torn one"
					return
				} else if !ok {
					closed = true
				}
				if i == 0 && j == 100 {
					s.close()
				}
			}
		}(i)
	}
	for i := 0; i < 8; i++ {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if s.cpu(pid) != -1 {
		t.Fatal("the files read after their close")
	}
}
