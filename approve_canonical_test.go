package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestApproveSeesCanonicalArgs: Options.Approve judges the arguments the
// tool then gets, byte for byte, with escapes resolved: a program that
// writes its request itself (through _spine, with "\u0064" for "d") cannot
// slip a value past a check of the text, and one that repeats a key is
// refused before the hook is asked.
func TestApproveSeesCanonicalArgs(t *testing.T) {
	var mu sync.Mutex
	var judged, got []string
	m := testManifest()
	m["echo"] = ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		mu.Lock()
		got = append(got, string(args))
		mu.Unlock()
		return args, nil
	}}
	r := newRunner(t, m, &Options{PoolSize: -1, Approve: func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
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
			out, err := r.Run(context.Background(), Request{Source: c.src})
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

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// FuzzCanonicalArgs: canonical arguments are JSON that decodes to what the
// original decodes to, and are their own canonical form.
func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":"\u0064\n\ud800"}`, `[1, {"b": [true, false, null]}, "x\"y"]`, `{"a":1,"a":2}`, "\"\xff\"", `{} {}`, `1e5`, ` "\u2028<>&" `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := canonicalArgs(data)
		if err != nil {
			return
		}
		if len(bytes.TrimSpace(data)) == 0 { // no arguments: left as they are
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q gave %q, not JSON", data, out)
		}
		var x, y any
		if json.Unmarshal(data, &x) == nil {
			if err := json.Unmarshal(out, &y); err != nil || !reflect.DeepEqual(x, y) {
				t.Fatalf("%q gave %q: %v", data, out, err)
			}
		}
		again, err := canonicalArgs(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("%q gave %q, then %q (%v)", data, out, again, err)
		}
	})
}
