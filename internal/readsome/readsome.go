// Package readsome reads what has arrived of a stream (a visitor's request
// body, an upstream's answer) without waiting for a full buffer, and gives
// up when a context ends: streams are relayed chunk by chunk as they come.
package readsome

import (
	"context"
	"errors"
	"io"
)

// Read reads at least one byte, or the end, into buf. Bytes read together
// with the end are answered first (nil error), the end on the next call.
// When ctx ends first it answers ctx's error; the read goes on in the
// background, so the caller must then stop using r (close it).
func Read(ctx context.Context, r io.Reader, buf []byte) (int, error) {
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := r.Read(buf)
		for n == 0 && err == nil {
			n, err = r.Read(buf)
		}
		ch <- result{n, err}
	}()
	select {
	case res := <-ch:
		if res.n > 0 && errors.Is(res.err, io.EOF) {
			return res.n, nil
		}
		return res.n, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
