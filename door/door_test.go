package door_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
)

func TestClipLogs(t *testing.T) {
	var b bytes.Buffer
	long := strings.Repeat("é", 300) // two bytes each: a cut must not split one
	logger := slog.New(door.ClipLogs(slog.NewJSONHandler(&b, nil))).With("with", long)
	logger.WithGroup("g").Error(long, "s", long, "err", errors.New(long), "bytes", []byte(long), "any", []string{long},
		slog.Group("inner", "s", long), "short", "kept", "n", 7)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, b.Bytes())
	}
	want := strings.Repeat("é", door.MaxLogText/2) + "… (600 bytes)"
	g, _ := rec["g"].(map[string]any)
	inner, _ := g["inner"].(map[string]any)
	for name, got := range map[string]any{"msg": rec["msg"], "with": rec["with"], "s": g["s"], "err": g["err"], "bytes": g["bytes"], "inner.s": inner["s"]} {
		if got != want {
			t.Errorf("%s = %v", name, got)
		}
	}
	if s, _ := g["any"].(string); !strings.HasSuffix(s, "bytes)") || len(s) > door.MaxLogText+20 {
		t.Errorf("any = %v", g["any"])
	}
	if g["short"] != "kept" || g["n"] != 7.0 {
		t.Errorf("short %v, n %v", g["short"], g["n"])
	}
}

func TestRequireToken(t *testing.T) {
	h := door.RequireToken("tok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") }))
	ts := spinetest.ServeHTTP(t, h)
	for auth, want := range map[string]int{"": 401, "Bearer tok2": 401, "Bearer tok": 200} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.URL, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (want == 401) != (resp.Header.Get("WWW-Authenticate") != "") || (want == 401) != resp.Close {
			t.Errorf("%q: status %d, WWW-Authenticate %q, close %v", auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), resp.Close)
		}
	}
}
