package service_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// TestRunRecord: "record": true answers with the run's record, inline JSON,
// which replays to the same output; /v1/run/stream takes ?record=true.
func TestRunRecord(t *testing.T) {
	ts := newServer(t, nil)
	program := "import random, time\nprint(lookup(key='book'), random.random(), time.time())\n"
	code, res, _ := post(t, t.Context(), ts.URL+"/v1/run", map[string]any{"source": program, "record": true})
	if code != 200 || res.Record == nil || len(res.Record.Calls) != 1 || res.Record.Source != program {
		t.Fatalf("%d %+v", code, res)
	}
	raw, err := json.Marshal(res.Record) // as a client keeps it
	if err != nil {
		t.Fatal(err)
	}
	rec, err := spine.ParseRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runner.Replay(t.Context(), rec, nil)
	if err != nil || out.Stdout != res.Stdout {
		t.Fatalf("replay: %v, stdout %q, recorded %q", err, out.Stdout, res.Stdout)
	}
	if code, res, _ = post(t, t.Context(), ts.URL+"/v1/run", map[string]any{"source": program}); code != 200 || res.Record != nil {
		t.Fatalf("without record: %d %+v", code, res.Record)
	}
	code, res, _ = do(t, streamRequest(t, ts.URL+"/v1/run/stream?record=true", strings.NewReader(program)))
	if code != 200 || res.Record == nil || !res.Record.Prefix || res.Record.Source != program {
		t.Fatalf("stream: %d %+v", code, res.Record)
	}
	if code, _, _ = do(t, streamRequest(t, ts.URL+"/v1/run/stream?record=maybe", strings.NewReader(program))); code != 400 {
		t.Fatalf("record=maybe: %d", code)
	}
}
