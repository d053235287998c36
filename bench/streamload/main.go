// Command streamload is the load loop of bench/stream.sh: time to first
// byte of streamed responses, throughput of one long stream, and many idle
// streams held open. It only ever targets loopback.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "", "target URL (its host is dialed at -addr)")
	addr := flag.String("addr", "127.0.0.1:8089", "loopback address to dial")
	mode := flag.String("mode", "ttfb", "ttfb, throughput or idle")
	n := flag.Int("n", 200, "requests (ttfb) or streams held open (idle)")
	hold := flag.Duration("hold", 10*time.Second, "how long idle streams are held")
	flag.Parse()
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 2000,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, *addr)
		},
	}}
	switch *mode {
	case "ttfb":
		var ds []time.Duration
		for i := 0; i < *n; i++ {
			start := time.Now()
			res, err := client.Get(*url)
			if err != nil {
				fail(err)
			}
			br := bufio.NewReader(res.Body)
			if _, err := br.ReadByte(); err != nil {
				fail(err)
			}
			ds = append(ds, time.Since(start))
			res.Body.Close()
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Printf("time to first byte, %d streams one after another: p50 %v p99 %v\n", len(ds), ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond))
	case "throughput":
		start := time.Now()
		res, err := client.Get(*url)
		if err != nil {
			fail(err)
		}
		buf := make([]byte, 256<<10)
		total, reads := 0, 0
		for {
			k, err := res.Body.Read(buf)
			total += k
			if k > 0 {
				reads++
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				fail(err)
			}
		}
		secs := time.Since(start).Seconds()
		fmt.Printf("one stream: %.1f MiB in %.2f s = %.1f MiB/s (%d reads)\n", float64(total)/(1<<20), secs, float64(total)/(1<<20)/secs, reads)
	case "idle":
		var wg sync.WaitGroup
		var mu sync.Mutex
		open := 0
		for i := 0; i < *n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), *hold)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", *url, nil)
				res, err := client.Do(req)
				if err != nil {
					return
				}
				br := bufio.NewReader(res.Body)
				if _, err := br.ReadByte(); err == nil {
					mu.Lock()
					open++
					mu.Unlock()
				}
				io.Copy(io.Discard, br)
				res.Body.Close()
			}()
		}
		time.Sleep(*hold / 2)
		mu.Lock()
		fmt.Printf("idle streams open: %d\n", open)
		mu.Unlock()
		os.Stdout.Sync()
		wg.Wait()
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "streamload:", err)
	os.Exit(1)
}
