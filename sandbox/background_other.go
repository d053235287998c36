//go:build !linux

package sandbox

// lowerThreadPriority is Linux-only; elsewhere the lane runs at normal
// priority.
func lowerThreadPriority() {}
