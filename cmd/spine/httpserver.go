package main

import (
	"container/list"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine/door"
)

// The defaults of the flags spine serve and spine mcp --http share.
const (
	defaultMaxConns    = 256
	defaultReadTimeout = 30 * time.Second
	defaultIdleTimeout = 60 * time.Second

	// defaultGrace is how long a shutdown waits for the requests in flight.
	defaultGrace = 30 * time.Second

	// maxHeaderTimeout bounds the time to send a request's headers when
	// --read-timeout is longer.
	maxHeaderTimeout = 10 * time.Second

	// defaultUnauthTimeout is how long a connection may read before a
	// request on it has shown the token (limitListener).
	defaultUnauthTimeout = 5 * time.Second
)

// httpLimits bound what clients can hold of an HTTP server: connections,
// and the time they take to send a request or keep an idle connection.
type httpLimits struct {
	maxConns    int
	readTimeout time.Duration // the headers (at most maxHeaderTimeout) and the body
	idleTimeout time.Duration // a keep-alive connection between requests

	// tenants are the bearer tokens a request may show (none: every
	// request authenticates its connection); unauthTimeout how long a
	// connection may read before one has (at most readTimeout). See
	// limitListener.
	tenants       *door.Tenants
	unauthTimeout time.Duration

	// acceptWait, when set, is called each time the listener has to wait
	// for a connection to close before it accepts another (tests).
	acceptWait func()
}

// orDefaults returns l with the defaults in place of zero fields.
func (l httpLimits) orDefaults() httpLimits {
	if l.maxConns <= 0 {
		l.maxConns = defaultMaxConns
	}
	if l.readTimeout <= 0 {
		l.readTimeout = defaultReadTimeout
	}
	if l.idleTimeout <= 0 {
		l.idleTimeout = defaultIdleTimeout
	}
	if l.unauthTimeout <= 0 {
		l.unauthTimeout = defaultUnauthTimeout
	}
	l.unauthTimeout = min(l.unauthTimeout, l.readTimeout)
	return l
}

// httpFlags are the flags of httpLimits and of the tokens.
type httpFlags struct {
	maxConns    *int
	readTimeout *time.Duration
	idleTimeout *time.Duration
	tokenFile   *string
	tokensFile  *string
}

func addHTTPFlags(fs *flag.FlagSet) httpFlags {
	return httpFlags{
		maxConns:    fs.Int("max-conns", defaultMaxConns, ""),
		readTimeout: fs.Duration("read-timeout", defaultReadTimeout, ""),
		idleTimeout: fs.Duration("idle-timeout", defaultIdleTimeout, ""),
		tokenFile:   fs.String("token-file", "", ""),
		tokensFile:  fs.String("tokens-file", "", ""),
	}
}

// tenants returns the tokens a server listening on addr (the value of the
// flag named listenFlag) takes: its one token, named "default", or the
// tenants of --tokens-file; none for none.
func (f httpFlags) tenants(listenFlag, addr string, stderr io.Writer) ([]door.Tenant, error) {
	if *f.tokensFile == "" {
		token, err := f.token(listenFlag, addr)
		if token == "" || err != nil {
			return nil, err
		}
		return []door.Tenant{{Name: "default", Token: token}}, nil
	}
	if *f.tokenFile != "" {
		return nil, errors.New("--tokens-file and --token-file: give one")
	}
	return readTokensFile(*f.tokensFile, stderr)
}

// limits returns the limits the flags set, or why they are bad.
func (f httpFlags) limits() (httpLimits, error) {
	if *f.maxConns <= 0 || *f.readTimeout <= 0 || *f.idleTimeout <= 0 {
		return httpLimits{}, errors.New("--max-conns, --read-timeout and --idle-timeout must be positive")
	}
	return httpLimits{maxConns: *f.maxConns, readTimeout: *f.readTimeout, idleTimeout: *f.idleTimeout}, nil
}

// token returns the token a server listening on addr (the value of the flag
// named listenFlag) requires: the content of --token-file without the white
// space around it, else $SPINE_TOKEN's, else none. A server that listens on
// anything but a loopback address must have one (listen checks the address
// it bound too).
func (f httpFlags) token(listenFlag, addr string) (string, error) {
	var token string
	if *f.tokenFile != "" {
		data, err := os.ReadFile(*f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return "", fmt.Errorf("--token-file %s is empty", *f.tokenFile)
		}
	} else {
		token = strings.TrimSpace(os.Getenv("SPINE_TOKEN"))
	}
	if !oneWord(token) {
		return "", errors.New("the token holds white space or control characters: it must be one word")
	}
	if token == "" && !isLoopback(addr) {
		return "", fmt.Errorf("%s %s is not a loopback address: set a token with --token-file FILE or SPINE_TOKEN, "+
			`which every request must then carry as "Authorization: Bearer <token>"`, listenFlag, addr)
	}
	return token, nil
}

// isLoopback reports whether addr (host:port) names a loopback address:
// localhost or a loopback IP. An empty host means every interface, and a
// name other than localhost may resolve to anything: neither is.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen listens on addr (the value of the flag named listenFlag). Without
// tokens (guarded) it then checks the address it bound, not only addr's name: a name
// such as localhost may resolve to an address that is not loopback. On
// failure it says why to out and returns nil and the exit code: 2 for a
// bound address that is not loopback, 4 when listening failed.
func listen(out serverLog, listenFlag, addr string, guarded bool) (net.Listener, int) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		out.error(err.Error())
		return nil, exitFailure
	}
	if !guarded {
		if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
			ln.Close()
			out.error(fmt.Sprintf("%s %s listens on %s, which is not a loopback address: set a token with --token-file FILE or SPINE_TOKEN, "+
				`which every request must then carry as "Authorization: Bearer <token>"`, listenFlag, addr, ln.Addr()))
			return nil, exitUsage
		}
	}
	return ln, exitOK
}

// bodyDeadline gives a request's body d to arrive: it sets the connection's
// read deadline when the handler starts. net/http lifts it when the body
// ends, as it starts watching the connection for a client that goes away, so
// a long run after the body is not cut (TestHTTPLimits checks). A handler may
// set deadlines of its own (the stream endpoint sets one per read).
func bodyDeadline(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}

// limitListener accepts at most cap(slots) connections at once: past it,
// Accept waits for one to close, and new connections wait in the kernel's
// backlog, costing the process nothing.
//
// A connection is unauthenticated until a request on it has shown the token
// (any request, on a server without one: authenticated). Those may hold at
// most share of the places: admitting one past it closes the oldest, which
// has had the longest to show the token. And none may read past its cutoff,
// a short time after it was accepted. So clients without the token, however
// many and however slowly they send their headers, cannot hold the places
// of those that have it, and a new client is admitted at once to show it.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	wait      func() // httpLimits.acceptWait

	share   int           // unauthenticated connections open at once, at most
	timeout time.Duration // an unauthenticated connection reads for this long, at most
	mu      sync.Mutex
	unauth  list.List // of *limitConn, the oldest first
}

func newLimitListener(ln net.Listener, limits httpLimits) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, limits.maxConns), closed: make(chan struct{}),
		wait: limits.acceptWait, share: unauthenticatedShare(limits.maxConns), timeout: limits.unauthTimeout}
}

// unauthenticatedShare is how many of n places unauthenticated connections
// may hold: a quarter, at least one.
func unauthenticatedShare(n int) int { return max(1, n/4) }

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		if l.wait != nil {
			l.wait()
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l, cutoff: time.Now().Add(l.timeout)}
	l.mu.Lock()
	var oldest *limitConn
	if l.unauth.Len() >= l.share {
		oldest = l.unauth.Remove(l.unauth.Front()).(*limitConn)
		oldest.waiting = nil
	}
	lc.waiting = l.unauth.PushBack(lc)
	l.mu.Unlock()
	if oldest != nil {
		oldest.Conn.Close() // its server goroutine's read fails, and it closes lc
	}
	lc.Conn.SetReadDeadline(lc.cutoff)
	return lc, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn frees its place of the listener when it is closed.
type limitConn struct {
	net.Conn
	l       *limitListener
	once    sync.Once
	cutoff  time.Time     // while unauthenticated, no read past it
	waiting *list.Element // in l.unauth while unauthenticated and open (l.mu)
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.forget()
		<-c.l.slots
	})
	return err
}

// authenticated marks the connection as one that has shown the token: it no
// longer counts against the share, and its reads are no longer cut.
func (c *limitConn) authenticated() {
	if c.forget() {
		c.Conn.SetReadDeadline(time.Time{}) // net/http sets its own for what it reads next
	}
}

// forget takes c out of the unauthenticated connections, and reports
// whether it was one.
func (c *limitConn) forget() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.waiting == nil {
		return false
	}
	c.l.unauth.Remove(c.waiting)
	c.waiting = nil
	return true
}

// unauthenticated reports whether c has not shown the token yet.
func (c *limitConn) unauthenticated() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.waiting != nil
}

// SetReadDeadline keeps an unauthenticated connection's reads within its
// cutoff, whatever deadline net/http asks for (the header timeout, the idle
// timeout of a keep-alive connection).
func (c *limitConn) SetReadDeadline(t time.Time) error {
	if c.unauthenticated() && (t.IsZero() || t.After(c.cutoff)) {
		t = c.cutoff
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *limitConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// connKey is the context key under which a request's connection travels
// (http.Server.ConnContext).
type connKey struct{}

// markAuthenticated marks the connection of every request that shows one of
// the tenants' tokens (every request, when there are none) as
// authenticated, before h runs.
func markAuthenticated(tenants *door.Tenants, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*limitConn); ok && c.unauthenticated() && showsToken(r, tenants) {
			c.authenticated()
		}
		h.ServeHTTP(w, r)
	})
}

// showsToken reports whether r carries one of the tenants' tokens, or
// there are none.
func showsToken(r *http.Request, tenants *door.Tenants) bool {
	if tenants.Len() == 0 {
		return true
	}
	_, _, shows := tenants.Identify(r)
	return shows
}
