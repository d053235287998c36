package sandbox

import "golang.org/x/sys/unix"

// schedIdle is SCHED_IDLE from <sched.h> (x/sys/unix names no policies).
const schedIdle = 5

// idleThreadClass moves the calling thread (pid 0 means the caller, which
// is all the worker's seccomp filter allows) into SCHED_IDLE.
func idleThreadClass() error {
	return unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: schedIdle}, 0)
}
