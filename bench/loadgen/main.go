// Command loadgen is the load loop of bench/load.sh: it sends requests to a
// local gateway at a fixed concurrency for a fixed time and prints req/s and
// latency percentiles. It only ever targets loopback.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "target URL (host names are dialed at -addr); several, comma-separated, are spread over the connections")
	addr := flag.String("addr", "127.0.0.1:8089", "loopback address to dial (empty: each URL's own host and port, which must be loopback)")
	method := flag.String("method", "GET", "method")
	body := flag.String("body", "", "request body")
	conns := flag.Int("c", 32, "concurrent connections")
	dur := flag.Duration("d", 10*time.Second, "duration")
	label := flag.String("label", "", "label for the output line")
	auth := flag.String("auth", "", "Authorization header value")
	pause := flag.Duration("pause", 0, "think time between one connection's requests (0: back to back)")
	count := flag.Int64("n", 0, "stop after this many requests in all, or at -d, whichever comes first (0: run for -d)")
	roundRobin := flag.Bool("rr", false, "with several URLs, each request takes the next one (instead of one URL per connection)")
	var headers headerFlags
	flag.Var(&headers, "H", `a request header, "Name: value" (may be repeated)`)
	flag.Parse()
	loopback := func(a string) bool {
		return strings.HasPrefix(a, "127.") || strings.HasPrefix(a, "[::1]") || strings.HasPrefix(a, "localhost")
	}
	if *addr != "" && !loopback(*addr) {
		fmt.Fprintln(os.Stderr, "loadgen: only loopback targets")
		os.Exit(2)
	}
	tr := &http.Transport{
		MaxIdleConnsPerHost: *conns,
		MaxConnsPerHost:     *conns,
		DialContext: func(ctx context.Context, network, target string) (net.Conn, error) {
			if *addr != "" {
				target = *addr
			} else if !loopback(target) {
				return nil, fmt.Errorf("loadgen: %s is not a loopback address", target)
			}
			return (&net.Dialer{}).DialContext(ctx, network, target)
		},
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	began := time.Now()
	deadline := began.Add(*dur)
	var issued atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	firstErr := "" // what the first failed request saw, to say why
	noteErr := func(what string) {
		mu.Lock()
		if firstErr == "" {
			firstErr = what
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	urls := strings.Split(*url, ",")
	var next atomic.Int64
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		target := urls[i%len(urls)]
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for time.Now().Before(deadline) && (*count == 0 || issued.Add(1) <= *count) {
				if *roundRobin {
					target = urls[int(next.Add(1)-1)%len(urls)]
				}
				req, err := http.NewRequest(*method, target, bytes.NewReader([]byte(*body)))
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", *label, err)
					os.Exit(2)
				}
				if *auth != "" {
					req.Header.Set("Authorization", *auth)
				}
				for _, h := range headers {
					req.Header.Add(h[0], h[1])
				}
				start := time.Now()
				res, err := client.Do(req)
				if err != nil {
					bad++
					noteErr(err.Error())
					continue
				}
				if res.StatusCode != 200 {
					got, _ := io.ReadAll(io.LimitReader(res.Body, 300))
					noteErr(fmt.Sprintf("%d %s", res.StatusCode, got))
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					bad++
					continue
				}
				mine = append(mine, time.Since(start))
				if *pause > 0 {
					time.Sleep(*pause)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	if *count == 0 {
		elapsed = *dur // the rate over the whole run, as before -n
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		fmt.Printf("%s: no successful requests (%d errors; the first: %s)\n", *label, errs, firstErr)
		os.Exit(1)
	}
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	fmt.Printf("%-12s %8.0f req/s  p50 %-10v p99 %-10v errors %d\n", *label, float64(len(lat))/elapsed.Seconds(), pct(0.5), pct(0.99), errs)
	if firstErr != "" {
		fmt.Fprintf(os.Stderr, "%s: the first error: %s\n", *label, firstErr)
	}
	fmt.Fprintf(os.Stderr, "%s: %d answered 200\n", *label, len(lat))
}

// headerFlags is the repeated -H flag: each "Name: value" a header.
type headerFlags [][2]string

func (h *headerFlags) String() string { return fmt.Sprint(*h) }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("a header is \"Name: value\", not %q", v)
	}
	*h = append(*h, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}
