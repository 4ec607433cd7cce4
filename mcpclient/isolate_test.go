package mcpclient_test

import (
	"encoding/json"
	"errors"
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
