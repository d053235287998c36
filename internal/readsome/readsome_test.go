package readsome

import (
	"context"
	"io"
	"testing"
	"time"
)

func TestReadAnswersWhatHasArrived(t *testing.T) {
	pr, pw := io.Pipe()
	go pw.Write([]byte("abc"))
	buf := make([]byte, 64)
	n, err := Read(context.Background(), pr, buf)
	if err != nil || string(buf[:n]) != "abc" {
		t.Fatalf("%q %v", buf[:n], err)
	}
	pw.Close()
	if n, err := Read(context.Background(), pr, buf); n != 0 || err != io.EOF {
		t.Fatalf("at the end: %d %v", n, err)
	}
}

func TestReadGivesUpWithItsContext(t *testing.T) {
	pr, _ := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := Read(ctx, pr, make([]byte, 8)); err != context.DeadlineExceeded {
		t.Fatalf("a stalled read: %v", err)
	}
	pr.Close()
}
