package workers

import (
	"fmt"
	"os"
)

// processCPU is statCPU of /proc/<pid>/stat read afresh (tests read any
// process, the pool's kept files only its workers': procstat.go).
func processCPU(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	return statCPU(data)
}

// readStatm is parseStatm of /proc/<pid>/statm read afresh.
func readStatm(pid int) (anon, shared int64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, 0, false
	}
	return parseStatm(data)
}
