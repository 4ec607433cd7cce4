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

// TestApproveRefusesKeysDifferingInCase: Go's encoding/json matches a
// struct's fields case-insensitively (the last of "key" and "KEY" wins), so
// a hook that reads "key" would approve a value the tool never gets. Such
// arguments are refused before the hook is asked, at any depth, for a tool
// that decodes its arguments itself and for a typed one (NewTool), called
// through the stubs and through a request the program writes itself.
func TestApproveRefusesKeysDifferingInCase(t *testing.T) {
	var mu sync.Mutex
	var judged, got []string
	type in struct {
		Key string `json:"key"`
	}
	m := spine.Manifest{
		// A tool that decodes into a Go struct itself, its schema open
		// (as the demo's lookup).
		"fetch": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Key string `json:"key"`
				O   struct {
					Path string `json:"path"`
				} `json:"o"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			mu.Lock()
			got = append(got, a.Key+a.O.Path)
			mu.Unlock()
			return a.Key + a.O.Path, nil
		}, InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"keys":{"type":"string"},"o":{"type":"object"}},"additionalProperties":true}`)},
		"typed": spine.NewTool("typed", func(ctx context.Context, a map[string]in) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, v := range a {
				got = append(got, v.Key)
			}
			return "", nil
		}),
	}
	r := spinetest.NewRunner(t, m, &spine.Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		mu.Lock()
		judged = append(judged, string(args))
		mu.Unlock()
		// The hook reads the keys as written, as a policy on a map does.
		if strings.Contains(string(args), `"key":"forbidden"`) {
			return errors.New("forbidden key")
		}
		return nil
	}})
	raw := func(tool, args string) string {
		return "import _spine, json\nresult = json.loads(_spine.call(b'{\"tool\": \"" + tool + "\", \"args\": " + args + "}'))"
	}
	for _, c := range []struct{ name, src, refused string }{
		{"stub call", `result = fetch(key="ok", KEY="forbidden")`, `"key" and "KEY"`},
		{"Kelvin sign", "result = fetch(**{'key': 'ok', '\\u212aey': 'forbidden'})", "\"key\" and \"\u212aey\""},
		{"nested", `result = fetch(key="ok", o={"path": "ok", "PATH": "forbidden"})`, `"path" and "PATH"`},
		{"raw request", raw("fetch", `{"KEY": "forbidden", "key": "ok"}`), `"KEY" and "key"`},
		{"typed tool", `result = typed(a={"key": "ok", "Key": "forbidden"})`, `"key" and "Key"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			judged, got = nil, nil
			mu.Unlock()
			out, err := r.Run(context.Background(), spine.Request{Source: c.src})
			var resp struct{ Error, Type string }
			var pe *spine.PythonError
			if errors.As(err, &pe) {
				resp.Type, resp.Error = pe.Type, pe.Message
			} else if err == nil {
				json.Unmarshal(out.Value, &resp)
			}
			want := "tool call refused: the arguments hold the keys " + c.refused + ", which differ only in case"
			mu.Lock()
			defer mu.Unlock()
			if resp.Type != "PermissionError" || resp.Error != want {
				t.Fatalf("response %v %s (the hook judged %q, the tool got %q), want PermissionError %q", err, valueOf(out), judged, got, want)
			}
			if len(judged) != 0 || len(got) != 0 {
				t.Fatalf("the hook judged %q and the tool got %q, want neither asked", judged, got)
			}
		})
	}
	// Keys that differ otherwise still reach the hook and the tool.
	out := spinetest.MustRun(t, r, spine.Request{Source: `result = fetch(key="ok", keys="x", o={"path": "/a"})`})
	if string(out.Value) != `"ok/a"` {
		t.Fatalf("value %s", out.Value)
	}
}
