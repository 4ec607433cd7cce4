package mcpclient_test

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpclient"
)

// TestServerVictimAmongBreakers measures what short runs that each break a
// server once (an answer that is not JSON) cost a program that uses the
// server well: three breakers run, one after another each, while the victim
// runs 30 programs of one call of slow(ms=20) (read-only), all as one
// caller (no Options.CallerOf); the figure is in docs/mcp.md:
//
//	go test -run TestServerVictimAmongBreakers -v ./mcpclient/
func TestServerVictimAmongBreakers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the Guest; a measurement")
	}
	s, err := mcpclient.Dial(t.Context(), func() mcp.Transport {
		return &mcp.CommandTransport{Command: spinetest.MCPCommand("misbehave")}
	}, "srv", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := spinetest.NewRunner(t, s.Tools(), &spine.Options{PoolSize: 4})
	const victimRuns = 30
	var (
		done            atomic.Bool
		breaks, refused atomic.Int64
		wg              sync.WaitGroup
	)
	for range 3 {
		wg.Go(func() {
			for !done.Load() {
				out, err := r.Run(t.Context(), spine.Request{Source: `
try:
    srv.respond(mode="garbage")
except RuntimeError as err:
    result = str(err)`})
				switch {
				case err != nil:
				case strings.HasPrefix(string(out.Value), `"mcp server srv is down: `):
					breaks.Add(1)
				case strings.Contains(string(out.Value), "are refused"):
					refused.Add(1)
				}
			}
		})
	}
	answered := 0
	var failures []string
	for range victimRuns {
		out, err := r.Run(t.Context(), spine.Request{Source: `
try:
    result = srv.slow(ms=20)
except RuntimeError as err:
    result = str(err)`})
		if err != nil {
			t.Fatal(err)
		}
		var v string
		json.Unmarshal(out.Value, &v)
		if v == "done" {
			answered++
		} else {
			failures = append(failures, v)
		}
	}
	done.Store(true)
	wg.Wait()
	t.Logf("victim: %d of %d calls answered, while breakers broke the server %d times (%d of their runs refused)", answered, victimRuns, breaks.Load(), refused.Load())
	for _, f := range failures[:min(len(failures), 3)] {
		t.Logf("a failure: %s", f)
	}
}
