package capability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/fault"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// Fetcher makes programs' outbound requests. The address actually dialed is
// checked (so DNS rebinding cannot slip past), on every redirect too; proxy
// environment variables are ignored.
type Fetcher struct {
	// Limits are the gateway's run limits (budgets.Limits): here an
	// answer's body (ResponseBody) and a request's (RequestBody, README.md,
	// Caddyfile: the request-body bound); zero fields take their defaults.
	Limits budgets.Limits
	// Streams holds streamed answers (fetchstream.go); nil reads every
	// answer whole.
	Streams *FetchStreams
	// StreamTimeout bounds a streamed answer from its head to its end
	// (stream_timeout; zero takes budgets.DefaultStreamTimeout).
	StreamTimeout time.Duration
}

// blockedPrefixes are never dialed unless private addresses are allowed:
// loopback, private, link-local (metadata services included), unique-local,
// CGNAT, unspecified, multicast, broadcast and reserved ranges.
var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
		"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "100::/64", "2001:db8::/32", "64:ff9b:1::/48",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
// address, checked as such.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// sixToFour embeds an IPv4 address in bits 16-48.
var sixToFour = netip.MustParsePrefix("2002::/16")

// Blocked reports whether ip is an address a program may not reach.
func Blocked(ip netip.Addr) bool {
	if ip.Zone() != "" {
		// A zoned address (fe80::1%eth0, ::1%1) names an interface; prefix
		// checks do not match it, so it is refused outright.
		return true
	}
	ip = ip.Unmap() // IPv4-mapped IPv6 is its IPv4 address
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		return Blocked(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	if ip.Is6() && sixToFour.Contains(ip) {
		b := ip.As16()
		return Blocked(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
	}
	return false
}

// badPorts are the Fetch Standard's blocked ports.
var badPorts = map[string]bool{}

func init() {
	for _, p := range []int{0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115,
		117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587,
		601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669,
		6679, 6697, 10080} {
		badPorts[strconv.Itoa(p)] = true
	}
}

// BadPort reports a port the Fetch Standard blocks ("" is the default).
func BadPort(port string) bool { return badPorts[port] }

// Allowed reports whether host:port matches an allow-list pattern: a host
// name, optionally "*." for any subdomain, optionally ":port". A pattern
// without a port allows the scheme's default port only.
func Allowed(patterns []string, scheme, host, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	if strings.Contains(host, "%") {
		return false // zoned IPv6 is never allowed (docs/threat-model.md)
	}
	for _, p := range patterns {
		p = strings.ToLower(strings.TrimSpace(p))
		if strings.Contains(p, "%") {
			continue
		}
		ph, pp := p, ""
		if h, prt, err := net.SplitHostPort(p); err == nil {
			ph, pp = h, prt
		}
		if pp == "" {
			pp = map[string]string{"http": "80", "https": "443"}[scheme]
		}
		if pp != port {
			continue
		}
		if strings.HasPrefix(ph, "*.") {
			if strings.HasSuffix(host, ph[1:]) && len(host) > len(ph)-1 {
				return true
			}
			continue
		}
		if host == strings.Trim(ph, "[]") {
			return true
		}
	}
	return false
}

type fetchArgs struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers [][2]string `json:"headers"`
	Body    *string     `json:"body"` // Latin-1: one char per byte
	// Text is a body the program gave as a string: its UTF-8 is the body
	// (the runtime sends it as it is, sparing the encoding to Latin-1).
	Text     *string `json:"text"`
	Redirect string  `json:"redirect"`
}

type fetchAnswer struct {
	Status     int         `json:"status"`
	StatusText string      `json:"statusText"`
	Headers    [][2]string `json:"headers"`
	Body       string      `json:"body"`
	// ASCII says the body is all ASCII: its Latin-1 string is its text, and
	// the runtime's text() and json() need no decoding.
	ASCII bool `json:"ascii,omitempty"`
	// Text, for a body that is UTF-8 but not all ASCII, is the body as its
	// text (Body is then empty): the runtime reads it without decoding.
	Text *string `json:"text,omitempty"`
	// Stream names a body that was not read ahead (fetchstream.go).
	Stream string `json:"stream,omitempty"`
}

var hopByHop = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authorization": true,
	"te": true, "trailer": true, "transfer-encoding": true, "upgrade": true, "host": true, "content-length": true}

// Fetch makes one request within the allow list. allowPrivate lifts the
// address check (never the allow list), for local testing.
func (f *Fetcher) Fetch(ctx context.Context, allow []string, raw json.RawMessage) (json.RawMessage, error) {
	return f.fetch(ctx, "", "", allow, false, raw, nil)
}

// FetchAllowingPrivate is Fetch with outbound_allow_private.
func (f *Fetcher) FetchAllowingPrivate(ctx context.Context, allow []string, raw json.RawMessage) (json.RawMessage, error) {
	return f.fetch(ctx, "", "", allow, true, raw, nil)
}

// fetch makes the request for owner (a run's or handle's id; "" reads the
// answer whole). An answer of unknown length, or over streamedAnswer, is
// streamed when the fetcher holds streams: its body is left for fetch.read
// or a relay, detached from ctx (the run may end before it is read).
// inject, if not nil, answers the headers the gateway sets for a URL
// (docs/secrets.md): they replace the program's, and leave on a redirect
// to another host.
func (f *Fetcher) fetch(ctx context.Context, owner, tenant string, allow []string, allowPrivate bool, raw json.RawMessage, inject func(ctx context.Context, scheme, host, port string) (http.Header, error)) (json.RawMessage, error) {
	var a fetchArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("Malformed fetch arguments.")
	}
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, bad("fetch: only absolute http and https URLs can be fetched.")
	}
	if BadPort(u.Port()) {
		return nil, bad("fetch: port %s is blocked (Fetch Standard port blocking).", u.Port())
	}
	if strings.Contains(u.Hostname(), "%") {
		return nil, fault.New(fault.Forbidden, "fetch to %s was refused: an IPv6 address with a zone is never reachable.", u.Host)
	}
	if !Allowed(allow, u.Scheme, u.Hostname(), u.Port()) {
		return nil, fault.New(fault.Forbidden, "fetch to %s is not in this execution's outbound allow list.", u.Host)
	}
	maxBody := int64(f.Limits.WithDefaults().ResponseBody)
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("dialing %q: not an address", host)
		}
		if !allowPrivate && Blocked(ip) {
			return errBlocked
		}
		return nil
	}}
	// The request lives past ctx only once its body is handed to the
	// stream table; until then ctx, or the fetch's own timeout, ends it.
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(ctx))
	var detached atomic.Bool
	stopParent := context.AfterFunc(ctx, func() {
		if !detached.Load() {
			cancelReq()
		}
	})
	defer stopParent()
	whole := time.AfterFunc(budgets.FetchTimeout, func() {
		if !detached.Load() {
			cancelReq()
		}
	})
	defer func() {
		whole.Stop()
		if !detached.Load() {
			cancelReq()
		}
	}()
	// injected are the header names the gateway set on any request of the
	// chain: net/http copies the first request's headers to each redirect,
	// so each hop drops them all, then sets its own host's.
	var injected []string
	setInjected := func(req *http.Request) error {
		for _, name := range injected {
			req.Header.Del(name)
		}
		if inject == nil {
			return nil
		}
		hs, err := inject(ctx, req.URL.Scheme, req.URL.Hostname(), req.URL.Port())
		if err != nil {
			return err
		}
		for name, vs := range hs {
			req.Header[name] = vs
			injected = append(injected, name)
		}
		return nil
	}
	client := &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // proxy environment variables are ignored
			DialContext:            dialer.DialContext,
			TLSHandshakeTimeout:    10 * time.Second,
			ResponseHeaderTimeout:  budgets.FetchTimeout,
			MaxResponseHeaderBytes: 64 << 10,
			DisableKeepAlives:      true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			switch a.Redirect {
			case "manual":
				return http.ErrUseLastResponse
			case "error":
				return errors.New("redirected, and redirect is 'error'")
			}
			if len(via) >= budgets.FetchRedirects {
				return fmt.Errorf("more than %d redirects", budgets.FetchRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return errors.New("redirected to a scheme other than http(s)")
			}
			if BadPort(req.URL.Port()) {
				return fmt.Errorf("redirected to the blocked port %s", req.URL.Port())
			}
			if !Allowed(allow, req.URL.Scheme, req.URL.Hostname(), req.URL.Port()) {
				return fmt.Errorf("redirected to %s, which is not in the outbound allow list", req.URL.Host)
			}
			return setInjected(req)
		},
	}
	var body io.Reader
	if a.Body != nil && a.Text != nil {
		return nil, bad("fetch: a request body is sent once, as bytes or as text.")
	}
	if a.Body != nil || a.Text != nil {
		var b []byte
		if a.Text != nil {
			b = []byte(*a.Text)
		} else {
			b = wirejson.Latin1Bytes(*a.Body)
		}
		maxReq := int64(f.Limits.WithDefaults().RequestBody)
		if int64(len(b)) > maxReq {
			return nil, fault.New(fault.TooLarge, "fetch: the request body is over its %d byte bound.", maxReq)
		}
		body = bytes.NewReader(b)
	}
	method := a.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(reqCtx, method, u.String(), body)
	if err != nil {
		return nil, bad("fetch: %v", err)
	}
	for _, h := range a.Headers {
		if !hopByHop[strings.ToLower(h[0])] {
			req.Header.Add(h[0], h[1])
		}
	}
	if err := setInjected(req); err != nil {
		return nil, err
	}
	// The stream budget is checked before the dial (fetchstream.go): an
	// answer that may stream holds its place from here.
	var p *place
	if owner != "" && f.Streams != nil {
		if p, err = f.Streams.reserve(ctx, owner, tenant); err != nil {
			return nil, err
		}
		defer p.done()
	}
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, errBlocked) {
			return nil, fault.New(fault.Forbidden, "fetch to %s was refused: it resolves to a loopback, private or otherwise internal address.", u.Host)
		}
		return nil, fault.New(fault.BadRequest, "fetch to %s failed: %s", u.Host, cleanErr(err))
	}
	if ans, ok, err := f.streamAnswer(p, u.Host, res, method, cancelReq, &detached); ok {
		return ans, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return nil, fault.New(fault.BadRequest, "fetch to %s failed while reading the body.", u.Host)
	}
	if int64(len(data)) > maxBody {
		return nil, fault.New(fault.TooLarge, "fetch to %s answered more than %d bytes.", u.Host, maxBody)
	}
	ans, err := answerHead(u.Host, res)
	if err != nil {
		return nil, err
	}
	if ascii := wirejson.IsASCII(data); !ascii && utf8.Valid(data) {
		text := string(data)
		ans.Text = &text
	} else {
		ans.Body = wirejson.Latin1(data)
		ans.ASCII = ascii
	}
	return wirejson.Marshal(ans)
}

// answerHead is an answer's status and headers, as the program sees them.
func answerHead(host string, res *http.Response) (fetchAnswer, error) {
	ans := fetchAnswer{Status: res.StatusCode, StatusText: http.StatusText(res.StatusCode), Headers: [][2]string{}}
	for k, vs := range res.Header {
		if hopByHop[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			ans.Headers = append(ans.Headers, [2]string{strings.ToLower(k), v})
		}
	}
	if ans.Status < 200 || ans.Status > 599 {
		return ans, fault.New(fault.BadRequest, "fetch to %s answered status %d.", host, ans.Status)
	}
	return ans, nil
}

// streamAnswer leaves a long or open-ended answer's body in the stream
// table, in the place p its fetch reserved (nil: every answer is read
// whole), and answers its head with the token; ok is false when the answer
// is to be read whole.
func (f *Fetcher) streamAnswer(p *place, host string, res *http.Response, method string, cancel context.CancelFunc, detached *atomic.Bool) (json.RawMessage, bool, error) {
	if p == nil || method == http.MethodHead ||
		res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified ||
		res.ContentLength >= 0 && res.ContentLength <= streamedAnswer {
		return nil, false, nil
	}
	ans, err := answerHead(host, res)
	if err != nil {
		res.Body.Close()
		return nil, true, err
	}
	streamTimeout := f.StreamTimeout
	if streamTimeout <= 0 {
		streamTimeout = budgets.DefaultStreamTimeout
	}
	detached.Store(true)
	end := time.AfterFunc(streamTimeout, cancel)
	ans.Stream = f.Streams.put(p, res.Body, func() { end.Stop(); cancel() })
	out, err := wirejson.Marshal(ans)
	return out, true, err
}

var errBlocked = errors.New("address refused")

// cleanErr drops the URL from net/http's error text (it is in the message
// already), and what it says of the gateway's machine: a failed lookup
// names the resolver it asked ("lookup x on 127.0.0.53:53: no such host"),
// a failed read the local address; the program is told only that the host
// could not be resolved, or what happened on the way to the address.
func cleanErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, errBlocked) {
		return "the address is internal"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsTimeout {
			return fmt.Sprintf("the host %s could not be resolved in time", dnsErr.Name)
		}
		return fmt.Sprintf("the host %s could not be resolved", dnsErr.Name)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Source != nil {
		quiet := *opErr
		quiet.Source = nil
		return quiet.Error()
	}
	return err.Error()
}
