package child

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"github.com/retainer-gw/retainer/internal/gctarget"
	"github.com/retainer-gw/retainer/workers/wire"
)

// harden closes the worker's doors after V8 has started: rlimits, Landlock
// (no file-system access at all) and a seccomp filter, all with
// no_new_privs. Order matters: Landlock's own system calls must run before
// seccomp would refuse them, and nothing after this opens a file.
func harden(cfg wire.WorkerConfig) error {
	if err := setRlimits(cfg); err != nil {
		return fmt.Errorf("worker rlimits: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("worker no_new_privs: %w", err)
	}
	if cfg.Landlock {
		// V1 strictly: start-up fails where the kernel has no Landlock.
		if err := landlock.V1.RestrictPaths(); err != nil {
			return fmt.Errorf("worker Landlock: %w (the kernel needs Landlock; the Caddyfile can say `landlock off` to run without it)", err)
		}
		// Then whatever newer ABIs add (truncate, ioctl, network, IPC scopes).
		if err := landlock.V6.BestEffort().Restrict(); err != nil {
			return fmt.Errorf("worker Landlock (newer ABI): %w", err)
		}
	}
	if cfg.Seccomp {
		if err := loadFilter(filter()); err != nil {
			return fmt.Errorf("worker seccomp: %w", err)
		}
	}
	return nil
}

// Audit architectures (linux/audit.h) and seccomp's kill action.
const (
	auditArchX86_64  = 0xc000003e
	auditArchAarch64 = 0xc00000b7
	x32SyscallBit    = 0x40000000
	retKillProcess   = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	seccompDataArch  = 4          // offsetof(struct seccomp_data, arch)
	seccompDataNr    = 0          // offsetof(struct seccomp_data, nr)
)

// loadFilter installs the policy behind an architecture guard of our own.
// The library's program lets a call from a foreign architecture through
// with the default action (allow) and answers an x32 call ENOSYS; a
// taken-over worker could then reach every refused call through the
// 32-bit entry (int 0x80). The guard kills the process instead (docs/architecture.md).
func loadFilter(f seccomp.Filter) error {
	policy, err := f.Policy.Assemble()
	if err != nil {
		return err
	}
	native := uint32(auditArchX86_64)
	if runtime.GOARCH == "arm64" {
		native = auditArchAarch64
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: native, SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
	}
	if runtime.GOARCH == "amd64" {
		guard = append(guard,
			bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retKillProcess},
		)
	}
	raw, err := bpf.Assemble(append(guard, policy...))
	if err != nil {
		return err
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("loading the filter: %w", errno)
	}
	return nil
}

// setRlimits: no core dumps (they would hold tenants' data), few open
// files, and a data-segment bound so that a huge ArrayBuffer (outside V8's
// heap bound) throws instead of growing the worker without end. RLIMIT_NPROC
// is left alone: Linux counts threads against it.
func setRlimits(cfg wire.WorkerConfig) error {
	limits := map[int]uint64{unix.RLIMIT_CORE: 0, unix.RLIMIT_NOFILE: 64}
	if cfg.RlimitData > 0 {
		limits[unix.RLIMIT_DATA] = cfg.RlimitData
	}
	for res, val := range limits {
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: val, Max: val}); err != nil {
			return fmt.Errorf("resource %d: %w", res, err)
		}
	}
	return nil
}

// filter refuses what a taken-over worker could use against the host. The
// default is to allow: the Go runtime and V8 need a broad, version-dependent
// set of calls, and Landlock plus rlimits cover the file system.
func filter() seccomp.Filter {
	self := uint64(os.Getpid())
	deny := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{
					Action: deny,
					Names: []string{
						"socket", "socketpair", "execve", "execveat", "fork", "vfork",
						"ptrace", "process_vm_readv", "process_vm_writev", "tkill",
						"rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
						"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
						"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
						"init_module", "finit_module", "delete_module", "kexec_load", "reboot",
						"io_uring_setup", "io_uring_enter", "io_uring_register",
						// Nothing of scheduling or I/O priority is the worker's
						// to change, for itself or the gateway; nor the CPUs it
						// runs on (worker_cpus places workers from the gateway,
						// and a worker must not leave its CPU: neither Go nor V8
						// sets an affinity).
						"setpriority", "ioprio_set", "sched_setaffinity",
					},
				},
				{
					Action: deny,
					NamesWithCondtions: []seccomp.NameWithConditions{
						// clone is allowed for threads only.
						{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}}},
						// Signals only to this process.
						{Name: "kill", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: self}}},
						{Name: "tgkill", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: self}}},
						// Resource limits of this process only (pid 0 or its
						// own).
						{Name: "prlimit64", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}, {Argument: 0, Operation: seccomp.NotEqual, Value: self}}},
						// Scheduling policy of the calling thread only (pid 0):
						// with the gateway's uid a worker could otherwise put
						// the gateway, or another tenant's worker, in SCHED_IDLE.
						{Name: "sched_setscheduler", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}}},
						{Name: "sched_setparam", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}}},
						{Name: "sched_setattr", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}}},
						// Page placement of this process only.
						{Name: "migrate_pages", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}, {Argument: 0, Operation: seccomp.NotEqual, Value: self}}},
						{Name: "move_pages", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}, {Argument: 0, Operation: seccomp.NotEqual, Value: self}}},
						// No signal-driven I/O aimed at another process.
						{Name: "fcntl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.F_SETOWN}}},
						{Name: "fcntl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.F_SETOWN_EX}}},
					},
				},
				{
					// glibc falls back to clone when clone3 is "not implemented",
					// so threads still start.
					Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
					Names:  []string{"clone3"},
				},
			},
		},
	}
}

// runProbe tries each forbidden action from inside the worker.
func runProbe() wire.ProbeReport {
	res := map[string]string{}
	record := func(name string, err error) {
		if err == nil {
			res[name] = "ALLOWED"
			return
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			res[name] = "denied: " + unix.ErrnoName(errno)
			return
		}
		res[name] = "denied: " + err.Error()
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	record("socket", err)
	record("execve", unix.Exec("/bin/true", []string{"true"}, nil))
	pid, _, errno := unix.RawSyscall(unix.SYS_FORK, 0, 0, 0)
	if errno == 0 && pid == 0 {
		os.Exit(0) // the child of a fork that should not have happened
	}
	if errno != 0 {
		record("fork", errno)
	} else {
		record("fork", nil)
	}
	f, err := os.Open("/etc/hostname")
	if err == nil {
		f.Close()
	}
	record("open", err)
	record("kill gateway", unix.Kill(os.Getppid(), 0))
	record("kill process group", unix.Kill(0, 0))
	gateway := os.Getppid()
	var lim unix.Rlimit
	record("prlimit gateway", unix.Prlimit(gateway, unix.RLIMIT_NOFILE, nil, &lim))
	record("setpriority gateway", unix.Setpriority(unix.PRIO_PROCESS, gateway, 10))
	var set unix.CPUSet
	set.Set(0)
	record("sched_setaffinity gateway", unix.SchedSetaffinity(gateway, &set))
	// Its own threads leaving the CPU worker_cpus gave them (pid 0: the
	// calling thread), to every CPU the machine has.
	var every unix.CPUSet
	for i := 0; i < runtime.NumCPU(); i++ {
		every.Set(i)
	}
	record("sched_setaffinity self", unix.SchedSetaffinity(0, &every))
	// The gateway's own policy (SCHED_OTHER, priority 0) asked for again: a
	// no-op where it is allowed, so a failing probe changes nothing.
	var param [1]int32
	_, _, errno = unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(gateway), 0 /* SCHED_OTHER */, uintptr(unsafe.Pointer(&param[0])))
	record("sched_setscheduler gateway", errnoOrNil(errno))
	_, _, errno = unix.RawSyscall(unix.SYS_SCHED_SETPARAM, uintptr(gateway), uintptr(unsafe.Pointer(&param[0])), 0)
	record("sched_setparam gateway", errnoOrNil(errno))
	record("sched_setattr gateway", unix.SchedSetAttr(gateway, &unix.SchedAttr{Size: unix.SizeofSchedAttr}, 0))
	_, _, errno = unix.RawSyscall(unix.SYS_IOPRIO_SET, 1 /* IOPRIO_WHO_PROCESS */, uintptr(gateway), 0)
	record("ioprio_set gateway", errnoOrNil(errno))
	p, q, err := os.Pipe()
	if err == nil {
		_, err = unix.FcntlInt(p.Fd(), unix.F_SETOWN, gateway)
		p.Close()
		q.Close()
	}
	record("fcntl F_SETOWN", err)

	_, headroom := gctarget.Policy()
	slack, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	forced := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(forced)
	return wire.ProbeReport{Environment: os.Environ(), Results: res, GCPercent: gctarget.Current(), GCHeadroom: headroom, TimerSlack: int64(slack),
		ForcedGCs: forced[0].Value.Uint64()}
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
