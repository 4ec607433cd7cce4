package spinetest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/spine-run/spine"
)

// ChainTools are the tools of the chained-read tests (the Guest's suites in
// package tests, and the root's control without the wake). slow is an early
// read that answers {"key": key}; probe (not early) first waits until slow
// has returned for "alpha" and "beta", then says whether the read for
// "alpha-beta" — the chained one — has started. Events are recorded in
// order, so the tests prove order with the tools' own gates, never with
// time.
type ChainTools struct {
	mu      sync.Mutex
	events  []string
	started map[string]bool
	left    int
	ab      chan struct{} // closed once alpha and beta have returned
}

// NewChainTools returns the tools, a and b not yet arrived.
func NewChainTools() *ChainTools {
	return &ChainTools{started: map[string]bool{}, left: 2, ab: make(chan struct{})}
}

// Ungated is for a run with early reads off, where a and b start only when
// the program reaches them: probe does not wait for them.
func (c *ChainTools) Ungated() *ChainTools {
	close(c.ab)
	c.left = -1
	return c
}

// Manifest is the tools slow and probe.
func (c *ChainTools) Manifest() spine.Manifest {
	return spine.Manifest{
		"slow": {AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.events = append(c.events, "start:"+a.Key)
			c.started[a.Key] = true
			if a.Key == "alpha" || a.Key == "beta" {
				if c.left--; c.left == 0 {
					close(c.ab)
				}
			}
			return map[string]string{"key": a.Key}, nil
		}},
		"probe": {Call: func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-c.ab:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			ok := c.started["alpha-beta"]
			if ok {
				c.events = append(c.events, "probe:true")
			} else {
				c.events = append(c.events, "probe:false")
			}
			return ok, nil
		}},
	}
}

// ChainOptions leave the probe loops room: a probe is a tool call, and how many
// the program makes before the wake depends on when the reads' goroutines
// get to run.
var ChainOptions = &spine.Options{MaxToolCalls: 1 << 20}

// Log is the events so far, in order ("start:KEY", "probe:BOOL").
func (c *ChainTools) Log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

// Index is where event first occurs in events, -1 if it does not.
func Index(events []string, event string) int {
	for i, e := range events {
		if e == event {
			return i
		}
	}
	return -1
}

// ChainSource is a program that waits (probe) until a and b have arrived and then, up to limit
// rounds, until the chained read of c has started; only then does the program
// reach a, b and c. The reads of a and b are prepared at its top.
func ChainSource(limit int, between string) string {
	return "for i in range(" + itoa(limit) + "):\n    if probe():\n        break\n" +
		"a = slow(key=\"alpha\")\nb = slow(key=\"beta\")\n" + between +
		"c = slow(key=a[\"key\"] + \"-\" + b[\"key\"])\nresult = c\n"
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// LastSlow is the record of the program's last call of slow: c's.
func LastSlow(t testing.TB, out *spine.Output) spine.ToolCall {
	t.Helper()
	var last *spine.ToolCall
	for i := range out.Calls {
		if out.Calls[i].Tool == "slow" {
			last = &out.Calls[i]
		}
	}
	if last == nil {
		t.Fatalf("no call of slow in %+v", out.Calls)
	}
	return *last
}
