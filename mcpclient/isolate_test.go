package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpclient"
)

// TestServerRefusesTheProgramThatBrokeIt: a program whose call breaks the
// server's session (an answer that is NaN, garbage, the process ending) gets
// that call's error, and its later calls of the server are refused at once,
// without breaking it again; another program's call made while the server
// reconnects waits for the reconnection and is answered. The server was
// reconnected once.
func TestServerRefusesTheProgramThatBrokeIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the Guest")
	}
	for _, mode := range []string{"nan", "garbage", "crash"} {
		t.Run(mode, func(t *testing.T) {
			d := newDialer("misbehave")
			s := d.dial(t)
			r := spinetest.NewRunner(t, s.Tools(), &spine.Options{PoolSize: -1})
			call := `srv.respond(mode="` + mode + `")`
			if mode == "crash" {
				call = "srv.crash()"
			}
			out, err := r.Run(t.Context(), spine.Request{Source: `
errors = []
for i in range(4):
    try:
        ` + call + `
    except RuntimeError as err:
        errors.append(str(err))
result = errors`})
			if err != nil {
				t.Fatal(err)
			}
			var errs []string
			if json.Unmarshal(out.Value, &errs) != nil || len(errs) != 4 {
				t.Fatalf("the breaking program's errors: %s", out.Value)
			}
			if !strings.HasPrefix(errs[0], "mcp server srv is down: ") {
				t.Fatalf("the breaking call: %q", errs[0])
			}
			for _, e := range errs[1:] {
				if !strings.HasPrefix(e, "mcp server srv: this program's calls are refused: an earlier call broke the server (") {
					t.Fatalf("a later call of the breaking program: %q", e)
				}
			}
			answer := make(chan string, 1)
			go func() {
				out, err := r.Run(t.Context(), spine.Request{Source: `srv.echo(text="fine")`})
				if err != nil {
					answer <- err.Error()
					return
				}
				answer <- string(out.Value)
			}()
			d.gate <- struct{}{}
			if got := <-answer; got != `"fine"` {
				t.Fatalf("another program while the server reconnects: %s", got)
			}
			if n := d.connections(); n != 2 {
				t.Fatalf("%d connections, want 2 (one reconnection)", n)
			}
		})
	}
}

// TestServerStuck: a server that stops answering (its process stopped) is
// reported by Err while a call waits, the call fails at its time limit, and
// the server's process is replaced by one that answers.
func TestServerStuck(t *testing.T) {
	d := newDialer("1")
	d.opts.CallTimeout = 2 * time.Second // the time a stuck call waits; the calls that answer take milliseconds
	s := d.dial(t)
	checkEcho(t, s)
	if err := d.cmd(0).Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cmd(0).Process.Signal(syscall.SIGKILL) })
	answer := make(chan error, 1)
	go func() {
		_, err := callTool(t, s, "srv.echo", `{"text": "x"}`)
		answer <- err
	}()
	var stuck *mcpclient.StuckError
	spinetest.WaitFor(t, "Err to report the server stuck", func() bool {
		err := s.Err()
		return errors.As(err, &stuck) || err != nil && !errors.As(err, new(*mcpclient.DownError))
	})
	if stuck == nil || !strings.HasPrefix(stuck.Error(), "mcp server srv is not answering: a call has waited ") {
		t.Fatalf("Err: %v", s.Err())
	}
	checkDown(t, "the stuck call", <-answer, "a call of echo got no answer in 2s")
	d.gate <- struct{}{}
	d.waitUp(t)
	checkEcho(t, s)
	if err := s.Err(); err != nil {
		t.Fatalf("Err after the restart: %v", err)
	}
}

// abandonCall calls tool of s with a file's path, waits for the server to
// get the call (the tool creates the file), then abandons the call, as a run
// whose time is up does.
func abandonCall(t *testing.T, s *mcpclient.Server, tool string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "called")
	ctx, cancel := context.WithCancel(t.Context())
	abandoned := make(chan error, 1)
	go func() {
		_, err := s.Tools()[tool].Call(ctx, json.RawMessage(`{"path": "`+path+`"}`))
		abandoned <- err
	}()
	spinetest.WaitFor(t, "the server to get the call of "+tool, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned call of %s: %v", tool, err)
	}
}

// hangServer makes the server of s stop answering anything, with a call of
// hang that its caller then abandons.
func hangServer(t *testing.T, s *mcpclient.Server) {
	t.Helper()
	abandonCall(t, s, "srv.hang")
}

// TestServerAbandonedCalls: a server that stops answering while the calls
// made of it are abandoned by their runs (each run's time limit shorter than
// the call time limit) is replaced once calls of eight runs are abandoned
// with nothing from the server since; the eighth's caller sees it at once,
// and Err, which /healthz shows, said so before.
func TestServerAbandonedCalls(t *testing.T) {
	d := newDialer("misbehave")
	s := d.dial(t)
	hangServer(t, s)
	for i := 2; i <= 8; i++ {
		abandonCall(t, s, "srv.hold") // the server still reads its calls
		if i == 7 {
			if err := s.Err(); err != nil && !errors.As(err, new(*mcpclient.StuckError)) {
				t.Fatalf("Err after 7 abandoned calls: %v", err)
			}
		}
	}
	checkDown(t, "Err after 8 abandoned calls", s.Err(), "calls of 8 runs were abandoned, unanswered, and nothing came from the server since the first")
	callWhileDown(t, d, s, "a call while the server is replaced")
	checkEcho(t, s)
}

// TestServerAbandonedCallTimesOut: one call abandoned by its run, of a
// server that answers nothing since, replaces the session at the call time
// limit, whatever the run's limit was; Err reports the server stuck while
// it waits, counting the abandoned call.
func TestServerAbandonedCallTimesOut(t *testing.T) {
	d := newDialer("misbehave")
	d.opts.CallTimeout = 2 * time.Second // the time an abandoned call waits; the calls that answer take milliseconds
	s := d.dial(t)

	hangServer(t, s)
	var stuck *mcpclient.StuckError
	spinetest.WaitFor(t, "Err to report the server stuck", func() bool {
		err := s.Err()
		return errors.As(err, &stuck) || err != nil && !errors.As(err, new(*mcpclient.DownError))
	})
	if stuck == nil || !strings.HasSuffix(stuck.Error(), " (calls abandoned by their runs: 1)") {
		t.Fatalf("Err: %v", s.Err())
	}
	d.waitDown(t)
	checkDown(t, "Err at the call time limit", s.Err(), "a call abandoned by its run got no answer in 2s, nor anything else since")
	d.gate <- struct{}{}
	d.waitUp(t)
	checkEcho(t, s)
	if n := d.connections(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestServerRetriesInFlightCalls: a call of a read-only tool in flight when
// another call breaks the session is made again on the next session and
// answered; the breaking call fails.
func TestServerRetriesInFlightCalls(t *testing.T) {
	d := newDialer("misbehave")
	s := d.dial(t)
	path := filepath.Join(t.TempDir(), "held")
	held := make(chan any, 1)
	go func() {
		v, err := callTool(t, s, "srv.hold", `{"path": "`+path+`"}`)
		if err != nil {
			v = err
		}
		held <- v
	}()
	spinetest.WaitFor(t, "the server to get the call of hold", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	_, err := callTool(t, s, "srv.crash", `{}`)
	checkDown(t, "the breaking call", err, "")
	d.gate <- struct{}{} // the next session
	if v := <-held; v != "open" {
		t.Fatalf("the call in flight: %v, want it made again and answered", v)
	}
	if n := d.connections(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

type callerKey struct{}

// TestServerRefusesACallerThatBreaksIt: the calls of a tool by one caller
// (Options.CallerOf) that broke the session three times, each alone in
// flight, are refused; another caller's calls, of that tool too, are not.
func TestServerRefusesACallerThatBreaksIt(t *testing.T) {
	d := newDialer("misbehave")
	d.opts.CallerOf = func(ctx context.Context) string {
		name, _ := ctx.Value(callerKey{}).(string)
		return name
	}
	s := d.dial(t)
	as := func(caller string) context.Context { return context.WithValue(t.Context(), callerKey{}, caller) }
	crash := s.Tools()["srv.crash"]
	for i := range 3 {
		_, err := crash.Call(as("mallory"), json.RawMessage(`{}`))
		checkDown(t, fmt.Sprintf("break %d", i+1), err, "")
		d.gate <- struct{}{}
		d.waitUp(t)
	}
	_, err := crash.Call(as("mallory"), json.RawMessage(`{}`))
	var refused *mcpclient.RefusedError
	if !errors.As(err, &refused) || refused.Caller != "mallory" || refused.Tool != "crash" ||
		!strings.HasPrefix(err.Error(), "mcp server srv: calls of crash by mallory are refused until ") ||
		!strings.Contains(err.Error(), " UTC: they broke the server 3 times (last: ") {
		t.Fatalf("the fourth call of crash by mallory: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the server after the refused call: %v", err)
	}
	if v, err := s.Tools()["srv.echo"].Call(as("mallory"), json.RawMessage(`{"text": "ok"}`)); err != nil || v != "ok" {
		t.Fatalf("mallory's call of another tool: %v, %v", v, err)
	}
	_, err = crash.Call(as("alice"), json.RawMessage(`{}`))
	checkDown(t, "alice's call of crash", err, "")
	callWhileDown(t, d, s, "a call after alice's")
}
