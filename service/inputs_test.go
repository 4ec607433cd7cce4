package service_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestInputsPythonCannotDecode: a request whose inputs Python's json module
// could not decode (an integer of 5,000 digits, text that is not UTF-8) is
// answered 400 with an error that says why, before any run.
func TestInputsPythonCannotDecode(t *testing.T) {
	ts := newServer(t, nil)
	for _, c := range []struct{ name, body, want string }{
		{"a long integer", `{"source": "1", "inputs": {"n": 1` + strings.Repeat("0", 4999) + `}}`, "integer of 5000 digits"},
		{"invalid UTF-8", "{\"source\": \"1\", \"inputs\": {\"s\": \"caf\xe9\"}}", "not valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out, _ := post(t, context.Background(), ts.URL+"/v1/run", c.body)
			if status != http.StatusBadRequest || out.Error == nil || !strings.Contains(out.Error.Message, c.want) {
				t.Fatalf("status %d, error %+v, want 400 naming %q", status, out.Error, c.want)
			}
		})
	}
}
