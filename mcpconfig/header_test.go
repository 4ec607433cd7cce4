package mcpconfig

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHeadersStayWithTheirHost: configured headers go to the configured
// server, and not to wherever it redirects.
func TestHeadersStayWithTheirHost(t *testing.T) {
	got := make(chan string, 2)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- "elsewhere:" + r.Header.Get("X-Secret")
	}))
	defer elsewhere.Close()
	configured := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- "configured:" + r.Header.Get("X-Secret")
		http.Redirect(w, r, elsewhere.URL, http.StatusTemporaryRedirect)
	}))
	defer configured.Close()
	client := &http.Client{Transport: headerTransport{map[string]string{"X-Secret": "s3"}, configuredHost(configured.URL + "/mcp"), http.DefaultTransport}}
	resp, err := client.Get(configured.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a, b := <-got, <-got; a != "configured:s3" || b != "elsewhere:" {
		t.Fatalf("headers seen: %q, %q", a, b)
	}
}
