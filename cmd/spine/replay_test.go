package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replayProgram takes random numbers, the clock, a uuid4 and three tool
// calls: every run of it prints something else.
const replayProgram = `import random, time, uuid
a = lookup(key="book")
b = lookup(key="pen")
c = prices.list(limit=1)
print(random.random(), time.time(), uuid.uuid4())
{"total": a + b, "cheapest": c[0]["key"], "when": time.time()}
`

// TestRecordReplayProcesses: spine run --record in one process, spine
// replay in another, with no tools at all (the record's stand-ins, which
// fail if called): the same output, byte for byte; an edited program fails
// naming its call.
func TestRecordReplayProcesses(t *testing.T) {
	dir := t.TempDir()
	prog, rec := filepath.Join(dir, "prog.py"), filepath.Join(dir, "run.record")
	if err := os.WriteFile(prog, []byte(replayProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	recorded := spineCLI(t, "", "run", "--demo-tools", "--record", rec, prog)
	recorded.check(t, 0, "*")
	if info, err := os.Stat(rec); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v %v", info, err)
	}
	other := spineCLI(t, "", "run", "--demo-tools", prog)
	if other.stdout == recorded.stdout {
		t.Fatalf("two runs printed the same:\n%s", other.stdout)
	}
	replayed := spineCLI(t, "", "replay", "--trace", rec)
	replayed.check(t, 0, recorded.stdout,
		`spine replay: call 1 lookup({"key":"book"}) at `, `spine replay: call 3 prices.list({"limit":1}) at `)
	if n := strings.Count(replayed.stderr, "spine replay: call "); n != 3 {
		t.Fatalf("%d calls traced:\n%s", n, replayed.stderr)
	}

	// The program edited to call another tool.
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["source"] = strings.Replace(replayProgram, `b = lookup(key="pen")`, `b = prices.list(limit=2)[1]["price"]`, 1)
	edited := filepath.Join(dir, "edited.record")
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(edited, data, 0o600); err != nil {
		t.Fatal(err)
	}
	spineCLI(t, "", "replay", edited).check(t, exitFailure, "*",
		`spine replay: spine: replay diverged from its record: call 2: the program called prices.list({"limit":2}) where the record has lookup({"key":"pen"})`)
	spineCLI(t, "", "replay", prog).check(t, exitUsage, "", "not a record")
}
