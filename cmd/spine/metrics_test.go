package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsListen: with --metrics-listen, a scraper without the token
// reads /metrics on its own address, and nothing else there; the main
// listener still wants the token for /metrics.
func TestMetricsListen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	p, addr := startEnv(t, []string{"SPINE_TOKEN=metrics-test-token"}, bin, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	var metrics string
	for _, line := range p.before {
		if _, rest, ok := strings.Cut(line, "metrics on http://"); ok {
			metrics = "http://" + strings.Fields(rest)[0]
		}
	}
	if metrics == "" {
		t.Fatalf("no metrics line among %q", p.before)
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if status, body := get(metrics); status != http.StatusOK || !strings.Contains(body, "spine_") {
		t.Errorf("GET %s without a token: %d, spine's metrics %v", metrics, status, strings.Contains(body, "spine_"))
	}
	for _, path := range []string{"/v1/run", "/healthz", "/"} {
		if status, _ := get(strings.TrimSuffix(metrics, "/metrics") + path); status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			t.Errorf("GET %s on the metrics listener: %d", path, status)
		}
	}
	if status, _ := get("http://" + addr + "/metrics"); status != http.StatusUnauthorized {
		t.Errorf("GET /metrics on --listen without the token: %d", status)
	}
}
