package workers

import (
	"os"
	"syscall"
)

// netnsAvailable says whether workers are started in a network namespace
// of their own (no interfaces, not even loopback): a worker does no I/O of
// its own (docs/architecture.md), so a taken-over one that slipped past seccomp still
// reaches no network. It needs root or unprivileged user namespaces; where
// neither works, the first spawn says so in the log and the pool goes on
// without.
func (pool *Pool) netnsAvailable() bool { return !pool.noNetns.Load() }

// setNetNamespace asks for a new network namespace, inside a new user
// namespace when the gateway is not root (mapping its own ids).
func setNetNamespace(a *syscall.SysProcAttr) {
	a.Cloneflags = syscall.CLONE_NEWNET
	if os.Geteuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
}
