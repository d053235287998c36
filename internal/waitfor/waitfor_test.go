package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithinSeesAConditionThatComesTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(time.Millisecond)
			n.Add(1)
		}
	}()
	if !Within(10*time.Second, func() bool { return n.Load() == 5 }) {
		t.Fatal("the condition came true and Within missed it")
	}
}

func TestWithinGivesUpAtItsDeadline(t *testing.T) {
	checks := 0
	start := time.Now()
	if Within(30*time.Millisecond, func() bool { checks++; return false }) {
		t.Fatal("a condition that never holds was answered true")
	}
	if time.Since(start) < 30*time.Millisecond || checks < 2 {
		t.Fatalf("gave up after %v and %d checks", time.Since(start), checks)
	}
}
