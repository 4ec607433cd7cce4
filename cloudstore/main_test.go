package cloudstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// The tests share one Runner of the test tools (as service's and
// mcpserver's do); gate holds programs. What follows is the part of
// service's and mcpserver's test kits the tests moved here use.
var (
	tools    = spinetest.NewTools()
	manifest = tools.Manifest()
	gate     = tools.Gate
	runner   *spine.Runner
)

func TestMain(m *testing.M) {
	spinetest.Main(m, &runner, manifest, nil)
}

// newSessionServer returns a Server over r (nil: the shared runner) and its
// test server; the Server's sessions are closed when the test ends.
func newSessionServer(t *testing.T, r *spine.Runner, opts *service.Options) (*service.Server, *httptest.Server) {
	t.Helper()
	if r == nil {
		r = runner
	}
	svc := service.New(r, opts)
	ts := spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc, ts
}

// client sends requests to a test server, with a token when set.
type client struct {
	t     *testing.T
	url   string
	token string
}

// send sends a request and returns the status, the body and the header.
func (c client) send(method, path, contentType string, body []byte) (int, []byte, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, raw, resp.Header
}

// create makes a session and returns its id.
func (c client) create() string {
	c.t.Helper()
	status, raw, _ := c.send("POST", "/v1/sessions", "", nil)
	var info service.SessionInfo
	if err := json.Unmarshal(raw, &info); err != nil || status != http.StatusCreated {
		c.t.Fatalf("POST /v1/sessions: status %d, %s", status, raw)
	}
	if id, err := hex.DecodeString(info.ID); err != nil || len(id) < 16 {
		c.t.Errorf("session id %q: not 128 bits or more in hex", info.ID)
	}
	return info.ID
}

// run runs source in session id.
func (c client) run(id, source string) (int, service.Response) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"source": source})
	status, raw, _ := c.send("POST", "/v1/sessions/"+id+"/run", "application/json", body)
	var out service.Response
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("status %d, body %q: %v", status, raw, err)
	}
	return status, out
}

// mustRun runs source in session id and returns its value.
func (c client) mustRun(id, source string) string {
	c.t.Helper()
	status, out := c.run(id, source)
	if status != 200 || out.Error != nil {
		c.t.Fatalf("run %q in %s: status %d, %+v", source, id, status, out.Error)
	}
	return string(out.Value)
}
