//go:build !linux

package store

import "os"

// fdatasync is fsync where the kernel has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
