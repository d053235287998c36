package s3

import (
	"context"
	"sync"
	"time"

	"github.com/retainer-gw/retainer/objects"
)

// bufferBudget counts the part buffers puts hold, in all and by space.
type bufferBudget struct {
	max, perSpace int
	wait          time.Duration
	mu            sync.Mutex
	held          int
	bySpace       map[string]int
	freed         chan struct{} // closed (and replaced) when one is given back
}

// take holds a buffer for space, waiting at most b.wait for one.
func (b *bufferBudget) take(ctx context.Context, space string) error {
	if b.max <= 0 {
		return nil
	}
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		var why error
		b.mu.Lock()
		switch {
		case b.perSpace > 0 && b.bySpace[space] >= b.perSpace:
			why = objects.ErrSpaceBusy
		case b.held >= b.max:
			why = objects.ErrBusy
		default:
			b.held++
			b.bySpace[space]++
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return why
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *bufferBudget) give(space string) {
	if b.max <= 0 {
		return
	}
	b.mu.Lock()
	b.held--
	if b.bySpace[space]--; b.bySpace[space] <= 0 {
		delete(b.bySpace, space)
	}
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// bufs and smalls keep buffers between puts, so a busy gateway does not
// make PartSize of garbage per object.
var bufs, smalls sync.Pool

// smallSize is what a put reads before it takes a part buffer.
const smallSize = 64 << 10

func getBuf() []byte {
	if b, ok := bufs.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, PartSize)
}

func putBuf(b []byte) { bufs.Put(&b) }

func getSmall() []byte {
	if b, ok := smalls.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, smallSize)
}

func putSmall(b []byte) { smalls.Put(&b) }
