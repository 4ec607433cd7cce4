package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spine-run/spine"
)

// The HTTP side of a Remote: connections of its own, its headers on each
// request, bounded responses, and errors with its secrets taken out.

// httpTransport returns the connections of one server of one request: no
// proxy, and, when u's host is a name, no connection to an address that
// is unspecified, multicast or link-local (169.254.169.254 is a cloud's
// metadata service); an address written in the URL was allowed as such.
func (r *Remotes) httpTransport(u *url.URL) *http.Transport {
	_, err := netip.ParseAddr(u.Hostname())
	literal := err == nil
	dialer := &net.Dialer{
		Timeout: r.opts.Timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			if literal {
				return nil
			}
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("connecting to %q: not an address", host)
			}
			if ip = ip.Unmap(); ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
				return fmt.Errorf("%s is at %s, an address Spine reaches by name for no MCP server", u.Hostname(), ip)
			}
			return nil
		},
	}
	return &http.Transport{
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    r.opts.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
	}
}

// remoteRoundTripper sends a server's requests with its headers, to its
// origin only, and bounds each response body.
type remoteRoundTripper struct {
	base    http.RoundTripper
	headers map[string]string
	origin  string
	max     int64
	over    *atomic.Bool // set when a response went over max
}

func (t remoteRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if o := origin(req.URL); o != t.origin {
		return nil, fmt.Errorf("a request to %s, not the server's origin", o)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, max: t.max, over: t.over}
	return resp, nil
}

// limitedBody fails a read past its bound.
type limitedBody struct {
	rc        io.ReadCloser
	left, max int64
	over      *atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 {
			return 0, err
		}
		b.over.Store(true)
		return 0, fmt.Errorf("the server sent a response over %d bytes, the limit", b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// redactor takes a server's secrets out of a text: its URL, the URL's path
// and query (a hosted server's URL often holds a key) and its headers'
// values (and each word of one, the token of "Bearer TOKEN").
type redactor struct {
	secrets []string // the longest first
	// over says a response went over max bytes: the SDK reports that as a
	// request that ended without a response.
	over *atomic.Bool
	max  int64
}

const redacted = "[redacted]"

func newRedactor(s Remote, u *url.URL) *redactor {
	r := &redactor{}
	add := func(v string, least int) {
		if len(v) >= least && !slices.Contains(r.secrets, v) {
			r.secrets = append(r.secrets, v)
		}
	}
	add(s.URL, 1)
	add(u.String(), 1)
	add(u.RequestURI(), 2) // "/" alone is no secret
	add(u.EscapedPath(), 2)
	add(u.Path, 2)
	add(u.RawQuery, 1)
	for _, v := range s.Headers {
		add(v, 4)
		for _, word := range strings.Fields(v) {
			add(word, 8)
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r *redactor) text(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

// err is the error of doing (connecting, listing) with err: a request's
// text cut to its cause (net/http names the URL), secrets taken out; ctx
// is the attempt's, whose deadline is timeout.
func (r *redactor) err(doing string, err error, ctx context.Context, timeout time.Duration) error {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: no answer within %v", doing, timeout)
	}
	if r.over != nil && r.over.Load() {
		return fmt.Errorf("%s: the server sent a response over %d bytes, the limit", doing, r.max)
	}
	text := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		text = ue.Err.Error()
	}
	return fmt.Errorf("%s: %s", doing, r.text(text))
}

// tool returns call, whose errors have the secrets taken out.
func (r *redactor) tool(call spine.Tool) spine.Tool {
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		v, err := call(ctx, args)
		if err != nil {
			return nil, &redactedError{text: r.text(err.Error()), cause: err}
		}
		return v, nil
	}
}

// redactedError says what its cause says, secrets taken out, and is what
// its cause is (errors.Is: context.Canceled, ...); it does not unwrap, so
// that the cause's text is not reached.
type redactedError struct {
	text  string
	cause error
}

func (e *redactedError) Error() string { return e.text }

func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }
