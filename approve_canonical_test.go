package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestApproveSeesCanonicalArgs: Options.Approve judges the arguments the
// tool then gets, byte for byte, with escapes resolved: a program that
// writes its request itself (through _spine, with "\u0064" for "d") cannot
// slip a value past a check of the text, and one that repeats a key is
// refused before the hook is asked.
func TestApproveSeesCanonicalArgs(t *testing.T) {
	var mu sync.Mutex
	var judged, got []string
	m := suiteManifest()
	m["echo"] = spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		mu.Lock()
		got = append(got, string(args))
		mu.Unlock()
		return args, nil
	}}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		mu.Lock()
		judged = append(judged, string(args))
		mu.Unlock()
		if strings.Contains(string(args), "forbidden") {
			return errors.New("forbidden path")
		}
		return nil
	}})
	// raw is a program that sends its own request: args is JSON text as a
	// Python bytes literal holds it.
	raw := func(args string) string {
		return "import _spine, json\nresult = json.loads(_spine.call(b'{\"tool\": \"echo\", \"args\": " + args + "}'))"
	}
	for _, c := range []struct{ name, src, refused, judged string }{
		{"an escaped letter", raw(`{"path": "forbid\\u0064en"}`), "forbidden path", `{"path":"forbidden"}`},
		{"a repeated key", raw(`{"path": "ok", "path": "forbidden"}`), `tool call refused: the arguments repeat the key "path"`, ""},
		{"spaces and escapes", raw(`{ "a" : [1, 2.50, "\\u00e9\\n\\/"] , "b": {"c": null}}`), "", `{"a":[1,2.50,"é\n/"],"b":{"c":null}}`},
		{"a normal call", "result = echo(path='é\"\\\\<>&\\x01', n=1.0)", "", `{"path":"é\"\\<>&\u0001","n":1.0}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			judged, got = nil, nil
			mu.Unlock()
			out, err := r.Run(context.Background(), spine.Request{Source: c.src})
			if c.refused != "" {
				var resp struct{ Error, Type string }
				if err == nil {
					json.Unmarshal(out.Value, &resp)
				}
				if resp.Type != "PermissionError" || resp.Error != c.refused {
					t.Fatalf("response %v %s, want PermissionError %q", err, valueOf(out), c.refused)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.judged == "" && len(judged) != 0 || c.judged != "" && (len(judged) != 1 || judged[0] != c.judged) {
				t.Fatalf("the hook judged %q, want %q", judged, c.judged)
			}
			if c.refused == "" && !reflect.DeepEqual(got, judged) {
				t.Fatalf("the tool got %q, the hook judged %q", got, judged)
			}
		})
	}
}
