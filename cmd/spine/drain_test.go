package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/service"
)

// drainAnswer is a request's status and, for a refusal, its error kind and
// Retry-After; err when it got no answer (the listener closed).
type drainAnswer struct {
	status     int
	kind       string
	retryAfter string
	err        error
}

func drainRequest(method, url, contentType, body string) drainAnswer {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return drainAnswer{err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	// A connection of its own: a kept-alive one would hide a listener
	// that no longer accepts.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return drainAnswer{err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var answer struct{ Error *struct{ Kind string } }
	json.Unmarshal(raw, &answer)
	a := drainAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if answer.Error != nil {
		a.kind = answer.Error.Kind
	}
	return a
}

// checkDraining checks, while a drain's delay holds the listener open, that
// /readyz answers 503, /livez 200, and a new request (method, path, body)
// is refused 503 closed with Retry-After.
func checkDraining(t *testing.T, base, method, path, contentType, body string) {
	t.Helper()
	if a := drainRequest("GET", base+"/readyz", "", ""); a.err != nil || a.status != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz during the drain delay: %+v, want 503", a)
	}
	if a := drainRequest("GET", base+"/livez", "", ""); a.err != nil || a.status != http.StatusOK {
		t.Errorf("GET /livez during the drain delay: %+v, want 200", a)
	}
	if a := drainRequest(method, base+path, contentType, body); a.err != nil || a.status != http.StatusServiceUnavailable || a.kind != "closed" || a.retryAfter == "" {
		t.Errorf("%s %s during the drain delay: %+v, want 503 closed with Retry-After", method, path, a)
	}
}

// checkClosed checks that nothing listens at addr any more.
func checkClosed(t *testing.T, addr string) {
	t.Helper()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after the drain", addr)
	}
}

// TestDrainDelayHoldsListener: an idle server's drain (its context ended
// as SIGTERM ends it) keeps the listener open, /readyz answering 503 and new
// requests refused 503, until the drain delay ends (here a gate the test
// opens); then the listener closes and the server returns 0. On both front
// doors: spine serve and spine mcp --http.
func TestDrainDelayHoldsListener(t *testing.T) {
	runner, _ := demoRunner(t, nil)
	for _, door := range []struct {
		name                            string
		serve                           func(ctx context.Context, stop func(), ln net.Listener, s serving) int
		method, path, contentType, body string
	}{
		{"serve", func(ctx context.Context, stop func(), ln net.Listener, s serving) int {
			svc := service.New(runner, nil)
			return serveDrained(ctx, stop, ln, svc, svc, s)
		}, "POST", "/v1/run", "application/json", `{"source": "1 + 1"}`},
		{"mcp", func(ctx context.Context, stop func(), ln net.Listener, s serving) int {
			server := mcpserver.NewServer(runner, nil)
			return serveMCP(ctx, stop, ln, server, mcpHTTP{runner: runner, log: slog.New(slog.DiscardHandler)}, s)
		}, "POST", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
	} {
		t.Run(door.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			base := "http://" + addr
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			delayed := make(chan struct{})
			var stderr strings.Builder
			served := make(chan int, 1)
			go func() {
				served <- door.serve(ctx, func() {}, ln, serving{grace: time.Minute, delay: time.Hour, delayed: delayed,
					log: serverLog{name: "test", w: &stderr}})
			}()
			if a := drainRequest("GET", base+"/readyz", "", ""); a.status != http.StatusOK {
				t.Fatalf("GET /readyz before the drain: %+v", a)
			}
			cancel(signalCause{syscall.SIGTERM})
			var readyz drainAnswer
			spinetest.WaitFor(t, "/readyz to answer 503", func() bool {
				readyz = drainRequest("GET", base+"/readyz", "", "")
				return readyz.status == http.StatusServiceUnavailable || readyz.err != nil
			})
			if readyz.err != nil {
				t.Fatalf("the listener closed before /readyz answered 503: %v", readyz.err)
			}
			checkDraining(t, base, door.method, door.path, door.contentType, door.body)
			select {
			case code := <-served:
				t.Fatalf("the server returned %d before the drain delay ended", code)
			default:
			}
			close(delayed)
			if code := <-served; code != exitOK {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			checkClosed(t, addr)
		})
	}
}

// TestDrainDelayTimer: the delay's own timer ends it after SIGTERM; a
// SIGINT (Ctrl-C) does not wait for it.
func TestDrainDelayTimer(t *testing.T) {
	for _, c := range []struct {
		cause   error
		delay   time.Duration
		waiting bool
	}{
		{signalCause{syscall.SIGTERM}, time.Hour, true},
		{signalCause{os.Interrupt}, time.Hour, false},
		{context.Canceled, time.Hour, true},
		{signalCause{syscall.SIGTERM}, 0, false},
		{signalCause{syscall.SIGTERM}, time.Nanosecond, false},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(c.cause)
		done := serving{delay: c.delay}.drainDelay(ctx)
		if c.waiting {
			select {
			case <-done:
				t.Errorf("%v, delay %v: the delay ended at once", c.cause, c.delay)
			default:
			}
		} else {
			<-done // a delay that never ends would fail the test by its time-out
		}
	}
}

// TestDrainDelayProcess sends SIGTERM to idle spine serve and spine mcp
// --http processes with a drain delay longer than the test: each keeps
// listening, /readyz answering 503 and new requests refused 503, after
// saying it is shutting down. A SIGINT then ends the process at once
// (the signals' default behaviour is back during the drain).
func TestDrainDelayProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	for _, door := range []struct {
		args                            []string
		method, path, contentType, body string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--drain-delay", "1h"}, "POST", "/v1/run", "application/json", `{"source": "1"}`},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--drain-delay", "1h"}, "POST", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
	} {
		t.Run(door.args[0], func(t *testing.T) {
			p, addr := start(t, bin, door.args...)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitLine(t, "shutting down")
			checkDraining(t, "http://"+addr, door.method, door.path, door.contentType, door.body)
			p.cmd.Process.Signal(os.Interrupt)
			err := func() error {
				for range p.lines {
				}
				return <-p.exited
			}()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != os.Interrupt {
				t.Fatalf("after a second signal: %v, want the process ended by SIGINT", err)
			}
		})
	}
	// A Ctrl-C first: the drain does not wait for the delay.
	p, _ := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--drain-delay", "1h")
	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}
}

// TestServerLogLines: with --log-format json, the warnings printed as lines
// (the tokens file's shares, checkShares) are records at Warn, their
// prefixes taken off; with text they stay the lines they are.
func TestServerLogLines(t *testing.T) {
	tenants := []service.Tenant{{Name: "a", StoreBytes: 1}}
	var b strings.Builder
	logger, err := (&logFlags{format: "json"}).logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	checkShares("spine serve", tenants, spine.SessionOptions{MaxLive: 1}, false, (&logFlags{format: "json"}).serverLog("spine serve", &b, logger).lines(slog.LevelWarn))
	var record struct{ Level, Msg string }
	if err := json.Unmarshal([]byte(b.String()), &record); err != nil || record.Level != "WARN" ||
		record.Msg != `token "a" has a store_bytes, which only a --session-store uses` {
		t.Fatalf("json: %q (%v), want one Warn record without the prefixes", b.String(), err)
	}
	b.Reset()
	checkShares("spine serve", tenants, spine.SessionOptions{MaxLive: 1}, false, (&logFlags{format: "text"}).serverLog("spine serve", &b, logger).lines(slog.LevelWarn))
	if want := "spine serve: warning: token \"a\" has a store_bytes, which only a --session-store uses\n"; b.String() != want {
		t.Fatalf("text: %q, want %q", b.String(), want)
	}
}
