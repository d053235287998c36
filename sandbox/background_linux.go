package sandbox

import "golang.org/x/sys/unix"

// lowerThreadPriority sets the calling thread's nice value to 19 (Linux
// applies PRIO_PROCESS with a thread id to that thread alone). Raising a
// nice value needs no privilege.
func lowerThreadPriority() {
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
}
