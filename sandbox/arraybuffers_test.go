package sandbox

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/program"
)

// rssKiB reads VmRSS or VmHWM of this process (the engine's isolates run
// in it).
func rssKiB(t *testing.T, field string) int64 {
	t.Helper()
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// ArrayBuffers and typed arrays count against the isolate's memory bound
// (bufferpool.cc): a program that holds more of them than its bound ends
// with MEMORY, caught or not, small arrays or large, and the process
// holds about the bound, not what the program asked for. Buffers that are
// only garbage, and buffers within the bound, never end a run.
func TestArrayBuffersCountAgainstTheBound(t *testing.T) {
	want := fault.OutOfMemory(64).Message
	for _, c := range []struct{ name, code string }{
		{"ArrayBuffers", `async () => { const keep = []; for (let i = 0; i < 384; i++) keep.push(new ArrayBuffer(1 << 20)); return keep.length }`},
		{"Uint8Arrays", `async () => { const keep = []; for (let i = 0; i < 384; i++) keep.push(new Uint8Array(1 << 20).fill(1)); return keep.length }`},
		{"caught", `async () => { const keep = []; for (let i = 0; i < 384; i++) { try { keep.push(new Float64Array(1 << 18)) } catch (e) {} } return keep.length }`},
		{"small ones", `async () => { const keep = []; for (let i = 0; i < 100000; i++) keep.push(new Uint8Array(100)); return keep.length }`},
		{"one large", `async () => new ArrayBuffer(100 << 20).byteLength`},
	} {
		t.Run(c.name, func(t *testing.T) {
			debug.FreeOSMemory()
			os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
			base := rssKiB(t, "VmRSS")
			out, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: c.code}, Timeout: 10 * time.Second})
			peak := rssKiB(t, "VmHWM")
			t.Logf("RSS %d MiB before, peak %d MiB (+%d MiB); answered %s %v", base>>10, peak>>10, (peak-base)>>10, out.Result, err)
			wantFault(t, err, fault.Memory, want)
			if grew := (peak - base) >> 10; grew > 160 {
				t.Errorf("the process grew by %d MiB under a 64 MiB bound", grew)
			}
			afterHostile(t)
		})
	}
	for _, c := range []struct{ name, code, want string }{
		{"garbage", `async () => { let n = 0; for (let i = 0; i < 512; i++) { const a = new Uint8Array(1 << 20); a[7] = 1; n += a[7] } return n }`, "512"},
		{"within the bound", `async () => { const keep = []; for (let i = 0; i < 40; i++) keep.push(new Uint8Array(1 << 20)); return keep.length }`, "40"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: c.code}, Timeout: 10 * time.Second})
			if err != nil || string(out.Result) != c.want {
				t.Fatalf("answered %s %v, want %s", out.Result, err, c.want)
			}
		})
	}
}
