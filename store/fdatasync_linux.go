package store

import (
	"os"
	"syscall"
)

// fdatasync writes f's data, and only the metadata needed to read it
// back, to disk (the journal's pages are written at creation, so none).
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
