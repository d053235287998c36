package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The background lane's threads run at nice 19, and a computation (whose
// isolate was prewarmed on the lane and is disposed there) still answers.
func TestBackgroundLaneIsLowPriority(t *testing.T) {
	e := engine(t)
	for i := 0; i < 5; i++ {
		out, err := e.Run(context.Background(), Job{Program: Program{Code: "async () => 40 + 2"}})
		if err != nil || string(out.Result) != "42" {
			t.Fatalf("run %d: %s, %v", i, out.Result, err)
		}
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/stat")
	low := 0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces); nice is
		// the 19th field of the line, the 17th after the name.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 16 {
			if nice, _ := strconv.Atoi(fields[16]); nice == 19 {
				low++
			}
		}
	}
	if low < backgroundThreads {
		t.Fatalf("%d threads at nice 19, want at least %d", low, backgroundThreads)
	}
}
