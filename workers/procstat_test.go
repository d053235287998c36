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
	for _, bad := range []string{"", "4242 no name S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 25a 75 0\n"} {
		if got := statCPU([]byte(bad)); got != -1 {
			t.Errorf("statCPU(%q) = %d, want -1", bad, got)
		}
	}
}

// The kept file reads what a fresh read of the file does, moves with the
// process's CPU time, and reads nothing once closed (the process reaped).
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
	s.close()
	if got := s.cpu(pid); got != -1 {
		t.Fatalf("closed, it read %d", got)
	}
}
