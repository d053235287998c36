package wire

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Link is the connection between the gateway and one worker: two
// socketpairs, one for each direction. Over a single socket each answer
// woke the worker twice: once for the next request and once for nothing,
// when the gateway read the answer and the kernel told the worker's side,
// registered edge-triggered for both readiness kinds by Go's poller, that
// it could write again (strace: an EPOLLOUT-only wake per invocation; a
// context switch apiece for fifty sleeping workers, docs/history/performance-log.md).
// So the worker reads one socket through the poller and writes the other,
// a blocking descriptor the poller never sees: nothing wakes it but work.
// The gateway keeps both of its ends in its poller, where a worker that
// stops reading parks a goroutine, never a thread.
type Link struct {
	in  io.ReadCloser
	out io.WriteCloser
}

func (l *Link) Read(p []byte) (int, error)  { return l.in.Read(p) }
func (l *Link) Write(p []byte) (int, error) { return l.out.Write(p) }

// Close closes both directions.
func (l *Link) Close() error {
	err := l.in.Close()
	if werr := l.out.Close(); err == nil {
		err = werr
	}
	return err
}

// NewLink makes the two socketpairs of a new worker: the gateway's link
// and the two ends the worker inherits, in the order of FdIn and FdOut
// (exec.Cmd's ExtraFiles); the caller closes those once the worker has
// started.
func NewLink() (gateway *Link, child []*os.File, err error) {
	var ends [2][2]int
	for i := range ends {
		if ends[i], err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0); err != nil {
			for _, e := range ends[:i] {
				syscall.Close(e[0])
				syscall.Close(e[1])
			}
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
	}
	// ends[0] carries the gateway's frames, ends[1] the worker's.
	toWorker, err := fileConn(ends[0][0], "to-worker")
	if err == nil {
		var fromWorker net.Conn
		if fromWorker, err = fileConn(ends[1][0], "from-worker"); err == nil {
			return &Link{in: fromWorker, out: toWorker}, []*os.File{os.NewFile(uintptr(ends[0][1]), "worker-in"), os.NewFile(uintptr(ends[1][1]), "worker-out")}, nil
		}
		toWorker.Close()
	} else {
		syscall.Close(ends[1][0])
	}
	syscall.Close(ends[0][1])
	syscall.Close(ends[1][1])
	return nil, nil, err
}

// WorkerLink is a worker's link to the gateway, from the two descriptors
// it inherited (FdIn, FdOut).
func WorkerLink() (*Link, error) { return FileLink(FdIn, FdOut) }

// FileLink is the worker's side of a link: it reads descriptor in and
// writes descriptor out, and owns both from then on.
func FileLink(in, out int) (*Link, error) {
	r, err := fileConn(in, "gateway-in")
	if err != nil {
		syscall.Close(out)
		return nil, err
	}
	// Blocking, so that os.NewFile leaves it out of the poller: a write
	// is one system call, and the gateway always reads.
	if err := syscall.SetNonblock(out, false); err != nil {
		r.Close()
		return nil, fmt.Errorf("fd %d is not open: %w", out, err)
	}
	return &Link{in: r, out: os.NewFile(uintptr(out), "gateway-out")}, nil
}

// LinkPair is both sides of a new link in this process, the worker's side
// owning descriptors of its own as across an exec: for tests of the
// protocol on either side.
func LinkPair() (gateway, worker *Link, err error) {
	gateway, child, err := NewLink()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	var fds [2]int
	for i, f := range child {
		if fds[i], err = syscall.Dup(int(f.Fd())); err != nil {
			for _, fd := range fds[:i] {
				syscall.Close(fd)
			}
			gateway.Close()
			return nil, nil, err
		}
	}
	if worker, err = FileLink(fds[0], fds[1]); err != nil {
		gateway.Close()
		return nil, nil, err
	}
	return gateway, worker, nil
}

// fileConn makes descriptor fd a net.Conn in the poller; fd itself is
// closed (net.FileConn works on a copy).
func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	if f == nil {
		return nil, fmt.Errorf("fd %d is not open", fd)
	}
	defer f.Close()
	return net.FileConn(f)
}

// SyscallConn is the reading end's, for ReadDrained.
func (l *Link) SyscallConn() (syscall.RawConn, error) {
	sc, ok := l.in.(syscall.Conn)
	if !ok {
		return nil, syscall.EINVAL
	}
	return sc.SyscallConn()
}
