//go:build !(linux && amd64)

package child

// foreignSyscall: only amd64 has a second (32-bit) system call entry to
// probe.
func foreignSyscall(string) {}
