// Command wsload is the load loop of bench/websocket.sh: it opens -c
// WebSockets to one echo handler, sends a message on each and waits for its
// echo, back to back, for a fixed time, and prints messages per second and
// round-trip percentiles. It only ever targets loopback.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

func main() {
	url := flag.String("url", "", "ws:// URL (its host is dialed at -addr)")
	addr := flag.String("addr", "127.0.0.1:8089", "loopback address to dial")
	conns := flag.Int("c", 32, "sockets")
	dur := flag.Duration("d", 10*time.Second, "duration")
	size := flag.Int("size", 64, "message bytes")
	label := flag.String("label", "", "label for the output line")
	flag.Parse()
	if !strings.HasPrefix(*addr, "127.") {
		fmt.Fprintln(os.Stderr, "wsload: only loopback targets")
		os.Exit(2)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, *addr)
	}}}
	msg := []byte(strings.Repeat("x", *size))
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	firstErr := ""
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(*dur)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), *dur+30*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, *url, &websocket.DialOptions{HTTPClient: client})
			if err != nil {
				mu.Lock()
				errs++
				if firstErr == "" {
					firstErr = err.Error()
				}
				mu.Unlock()
				return
			}
			defer c.Close(websocket.StatusNormalClosure, "")
			var mine []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
					break
				}
				if _, _, err := c.Read(ctx); err != nil {
					mu.Lock()
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(float64(len(lat)-1)*p)]
	}
	fmt.Printf("%-22s %9.0f msg/s  p50 %7.2f ms  p99 %7.2f ms  errors %d %s\n", *label, float64(len(lat))/elapsed.Seconds(),
		float64(pct(0.5).Microseconds())/1000, float64(pct(0.99).Microseconds())/1000, errs, firstErr)
}
