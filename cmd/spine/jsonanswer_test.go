package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/service"
)

// TestJSONAnswerIsHTTPAnswer: spine run --json prints, for a program, what
// POST /v1/run answers for it (service.Response), timing aside, plus
// exit_code; a traceback names the program <stdin> rather than <agent>.
func TestJSONAnswerIsHTTPAnswer(t *testing.T) {
	ctx := context.Background()
	runner, err := spine.New(ctx, spine.Manifest{}, &spine.Options{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close(ctx)
	srv := httptest.NewServer(service.New(runner, nil))
	defer srv.Close()

	programs := []struct {
		name, source string
		exit         int
	}{
		{"value, output and a file", `import sys
print("out")
print("err", file=sys.stderr)
open("report.txt", "w").write("three")
result = {"a": [1, 2.5, "x", None, True]}`, exitOK},
		{"Python error", "x = 1\nraise ValueError(f\"bad {x}\")\n", exitPython},
		{"no value", `print("only output")`, exitOK},
	}
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			cli := answer(t, []byte(spineCLI(t, p.source, "run", "--json", "-").stdout))
			if got := cli["exit_code"]; got != float64(p.exit) {
				t.Errorf("exit_code %v, want %d", got, p.exit)
			}
			delete(cli, "exit_code")
			if e, ok := cli["error"].(map[string]any); ok {
				e["traceback"] = strings.ReplaceAll(e["traceback"].(string), `"<stdin>"`, `"<agent>"`)
			}

			body, _ := json.Marshal(map[string]string{"source": p.source})
			resp, err := http.Post(srv.URL+"/v1/run", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			web := answer(t, data)

			if !reflect.DeepEqual(cli, web) {
				c, _ := json.MarshalIndent(cli, "", "  ")
				w, _ := json.MarshalIndent(web, "", "  ")
				t.Errorf("spine run --json:\n%s\nPOST /v1/run:\n%s", c, w)
			}
			if p.exit == exitOK && web["error"] != nil || p.exit != exitOK && web["error"] == nil {
				t.Errorf("error %v for a program whose exit code is %d", web["error"], p.exit)
			}
		})
	}
}

// answer decodes a run's JSON answer, without its timing (which differs
// from run to run); it must have one.
func answer(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	if _, ok := m["timing"].(map[string]any); !ok {
		t.Fatalf("no timing in %s", data)
	}
	delete(m, "timing")
	return m
}
