package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine/door"
)

// TestUnauthenticatedShare: connections that have not shown the token hold at
// most their share of --max-conns places (a quarter). A flood of them
// trickling header lines is closed oldest first as newer ones come, never
// holds more than its share, and an authenticated request on a new
// connection, made while the flood's last connections are still open, is
// admitted and served at once.
func TestUnauthenticatedShare(t *testing.T) {
	const maxConns, flood, share = 8, 20, 2 // a quarter of the places
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	watched := &countingListener{Listener: inner, accepted: make(chan struct{}, flood+4)}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") })
	limits := httpLimits{maxConns: maxConns, readTimeout: time.Hour, idleTimeout: time.Hour, tenants: door.NewTenants(nil, []door.Tenant{{Name: "t", Token: "tok"}}, 0)}
	addr := serveInProcess(t, door.RequireToken("tok", ok), limits, watched)

	conns := make([]net.Conn, flood)
	for i := range conns {
		conns[i], _ = rawRequest(t, addr, "GET /v1/run HTTP/1.1\r\nHost: localhost\r\nX-Trickle: 1\r\n")
		<-watched.accepted
	}
	// Every connection of the flood but the last share ones was closed by
	// the server, oldest first, unanswered: an end of file, or a reset
	// when the kernel still held header lines the server had not read.
	for i, c := range conns[:flood-share] {
		if rest, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) || len(rest) != 0 {
			t.Fatalf("flood connection %d: read %q, %v", i, rest, err)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/run", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "served" {
		t.Fatalf("the authenticated request: %d %s", resp.StatusCode, body)
	}
	// At most the flood's share, one being admitted past it and the
	// authenticated client were open at once.
	if n := watched.most(); n > share+2 {
		t.Fatalf("%d connections were open at once, want at most %d", n, share+2)
	}
}

// TestUnauthenticatedCutoff: a connection that has not shown the token reads
// until its cutoff only, a keep-alive one included, whatever the idle and
// header timeouts; one that has shown it reads on.
//
// Headers that trickle are cut, unanswered, at a short cutoff. What net/http
// asks of a connection's deadlines is read off the connection, with a cutoff
// no busy machine reaches: every read deadline of a connection without the
// token is at its cutoff or before, however many requests it makes; a
// connection that has shown the token has its deadlines lifted past it.
func TestUnauthenticatedCutoff(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/open", ok) // as /healthz: no token needed
	mux.Handle("/", door.RequireToken("tok", ok))

	short := httpLimits{readTimeout: time.Hour, idleTimeout: time.Hour, tenants: door.NewTenants(nil, []door.Tenant{{Name: "t", Token: "tok"}}, 0), unauthTimeout: 50 * time.Millisecond}
	c, r := rawRequest(t, serveInProcess(t, mux, short, nil), "GET /open HTTP/1.1\r\nHost: localhost\r\n")
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("trickling headers: read %q, %v", rest, err)
	}
	c.Close()

	const cutoff = time.Hour
	long := httpLimits{readTimeout: 2 * cutoff, idleTimeout: 2 * cutoff, tenants: door.NewTenants(nil, []door.Tenant{{Name: "t", Token: "tok"}}, 0), unauthTimeout: cutoff}
	watched := &deadlineListener{Listener: mustListen(t)}
	addr := serveInProcess(t, mux, long, watched)
	// Two requests without the token on one connection: the second is
	// read after net/http set the first's idle deadline.
	c, r = rawRequest(t, addr, "GET /open HTTP/1.1\r\nHost: localhost\r\n\r\n")
	for i := range 2 {
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("open endpoint, request %d: %v %v", i+1, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		if i == 0 {
			io.WriteString(c, "GET /open HTTP/1.1\r\nHost: localhost\r\n\r\n")
		}
	}
	unauth := watched.conn(0).readDeadlines()
	if len(unauth) < 3 {
		t.Fatalf("read deadlines %v: want the cutoff, then those of two requests", unauth)
	}
	for _, d := range unauth[1:] {
		if d.IsZero() || d.After(unauth[0]) {
			t.Fatalf("an unauthenticated connection's read deadlines %v: one is past its cutoff, %v", unauth, unauth[0])
		}
	}

	// With the token: the deadline net/http sets for the next request (the
	// idle time, twice the cutoff) is kept.
	c, r = rawRequest(t, addr, "GET /x HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer tok\r\n\r\n")
	for i := range 2 {
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("with the token, request %d: %v %v", i+1, resp, err)
		}
		if body, _ := io.ReadAll(resp.Body); string(body) != "ok" {
			t.Fatalf("with the token, request %d: %s", i+1, body)
		}
		if i == 0 {
			io.WriteString(c, "GET /x HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer tok\r\n\r\n")
		}
	}
	authed := watched.conn(1).readDeadlines()
	if !slices.ContainsFunc(authed, func(d time.Time) bool { return d.After(authed[0]) }) {
		t.Fatalf("an authenticated connection's read deadlines %v: none past its cutoff %v", authed, authed[0])
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// deadlineListener records the read deadlines set on the connections it
// accepted, in the order of their acceptance.
type deadlineListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*deadlineConn
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &deadlineConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, dc)
	l.mu.Unlock()
	return dc, nil
}

func (l *deadlineListener) conn(i int) *deadlineConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[i]
}

type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	read []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = append(c.read, t)
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = append(c.read, t)
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) readDeadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.read)
}
