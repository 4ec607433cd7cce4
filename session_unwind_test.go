package spine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestSessionInterruptUnwinds: a session's run stopped by its ctx unwinds
// through every handler of the program, wherever its loop is (at the top
// level or in a function, starting a try block or not), keeps what the
// handlers printed and set, and leaves the session usable. A handler that
// takes many ticks is not interrupted again while it handles the interrupt.
// Each program calls mark once from its loop, and its ctx is cancelled then:
// the interrupt lands in the loop or in that call.
func TestSessionInterruptUnwinds(t *testing.T) {
	if testing.Short() {
		t.Skip("a session per case")
	}
	ctx := context.Background()
	entered := make(chan struct{}, 1)
	m := suiteManifest()
	m["mark"] = spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		return true, nil
	}}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1})
	handler := "    cleaned = True\n    print('handler ran')\n"
	for _, c := range []struct{ name, src string }{
		{"top-level loop starting try/finally", "try:\n    while True: s = s or mark()\nfinally:\n" + handler},
		{"top-level loop starting try/except KeyboardInterrupt", "try:\n    while True: s = s or mark()\nexcept KeyboardInterrupt:\n" + handler},
		{"one-line loop with two statements", "try:\n    while 1: s = s or mark(); pass\nfinally:\n" + handler},
		{"loop with a condition", "try:\n    while s or mark(): s = True\nfinally:\n" + handler},
		{"loop in a function", "def f():\n    global cleaned\n    s = None\n    try:\n        while True: s = s or mark()\n    finally:\n        cleaned = True\n        print('handler ran')\nf()\n"},
		{"for loop", "try:\n    for i in range(1 << 62): s = s or mark()\nfinally:\n" + handler},
		{"handler longer than a tick", "try:\n    x = 0\n    while True: s = s or mark()\nfinally:\n    total = 0\n    for i in range(50000):\n        total += i\n" + handler},
		{"sleep", "import time\ntry:\n    mark()\n    time.sleep(3600)\nfinally:\n" + handler},
		{"sleep, then the end of the program", "import time\ntry:\n    mark()\n    time.sleep(3600)\nexcept KeyboardInterrupt:\n" + handler},
		{"nested handlers", "try:\n    try:\n        while True: s = s or mark()\n    finally:\n        inner = True\nfinally:\n    cleaned = inner\n    print('handler ran')\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spinetest.NewSession(t, r)
			spinetest.Step(t, s, "s = None\ncleaned = False")
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			type answer struct {
				out *spine.Output
				err error
			}
			done := make(chan answer, 1)
			go func() {
				out, err := s.Run(runCtx, spine.Request{Source: c.src})
				done <- answer{out, err}
			}()
			<-entered
			cancel()
			a := <-done
			if spine.Classify(a.err) != spine.OutcomeCanceled {
				t.Fatalf("run: %v", a.err)
			}
			if a.out == nil || !strings.Contains(a.out.Stdout, "handler ran") {
				t.Fatalf("the handler's output: %+v", a.out)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("session after the interrupt: %v", err)
			}
			if got := spinetest.Step(t, s, "cleaned"); got != "true" {
				t.Fatalf("cleaned = %s after the interrupt", got)
			}
		})
	}
}
