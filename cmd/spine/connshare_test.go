package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine/service"
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
	limits := httpLimits{maxConns: maxConns, readTimeout: time.Hour, idleTimeout: time.Hour, tokens: []string{"tok"}}
	addr := serveInProcess(t, service.RequireToken("tok", ok), limits, watched)

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
// for the short unauthenticated time only, a keep-alive one included,
// whatever the idle and header timeouts; one that has shown it keeps its
// connection past that time.
func TestUnauthenticatedCutoff(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/open", ok) // as /healthz: no token needed
	mux.Handle("/", service.RequireToken("tok", ok))
	limits := httpLimits{readTimeout: time.Hour, idleTimeout: time.Hour, tokens: []string{"tok"}, unauthTimeout: 50 * time.Millisecond}
	addr := serveInProcess(t, mux, limits, nil)

	// Headers that trickle: cut at the unauthenticated time, unanswered.
	c, r := rawRequest(t, addr, "GET /open HTTP/1.1\r\nHost: localhost\r\n")
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("trickling headers: read %q, %v", rest, err)
	}
	c.Close()
	// A request without the token on a keep-alive connection is answered,
	// and the connection is closed at the unauthenticated time.
	c, r = rawRequest(t, addr, "GET /open HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("open endpoint: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the answer: read %q, %v", rest, err)
	}
	// With the token, the connection is not cut: a second request after
	// the first one's answer is served on it, once a third connection
	// (without the token) has been cut, which happens after the
	// unauthenticated time.
	c, r = rawRequest(t, addr, "GET /x HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer tok\r\n\r\n")
	if resp, err = http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("with the token: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	_, r3 := rawRequest(t, addr, "GET /open HTTP/1.1\r\nHost: localhost\r\n")
	io.ReadAll(r3)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer tok\r\n\r\n")
	if resp, err = http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second request with the token: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "ok") {
		t.Fatalf("second request: %s", body)
	}
}
