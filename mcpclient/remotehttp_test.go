package mcpclient

import (
	"context"
	"net/url"
	"strings"
	"testing"
)

// TestRemoteDialGuard: a server's connections go by name to no link-local,
// unspecified or multicast address (the address a name resolved to is what
// the dialer checks), while an address written in the URL, which the allow
// list named, is dialed as it is.
func TestRemoteDialGuard(t *testing.T) {
	r := NewRemotes(nil)
	byName := r.httpTransport(&url.URL{Scheme: "http", Host: "metadata.example"})
	for _, address := range []string{"169.254.169.254:80", "[fe80::1]:80", "0.0.0.0:80", "[::]:80", "224.0.0.1:80", "[::ffff:169.254.169.254]:80"} {
		_, err := byName.DialContext(t.Context(), "tcp", address)
		if err == nil || !strings.Contains(err.Error(), "an address Spine reaches by name for no MCP server") {
			t.Errorf("%s by name: %v", address, err)
		}
	}
	literal := r.httpTransport(&url.URL{Scheme: "http", Host: "169.254.169.254:1"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the guard lets it through; the dial itself is not made
	if _, err := literal.DialContext(ctx, "tcp", "169.254.169.254:1"); err == nil || strings.Contains(err.Error(), "by name") {
		t.Errorf("an address the URL names: %v", err)
	}
}
