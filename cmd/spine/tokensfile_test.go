package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

const (
	secretA = "alice-secret-0123456789"
	secretB = "bob-secret-0123456789ab"
)

// TestParseTokensFile: a good file gives each token its name and limits; a
// bad one is refused with an error naming the entry, never quoting a token.
func TestParseTokensFile(t *testing.T) {
	good := `{"tokens": [
		{"name": "alice", "token": "` + secretA + `", "sessions": 10, "live_sessions": 4, "hibernated_memory": "256MiB", "session_dir_bytes": 1048576},
		{"name": "bob", "token": "` + secretB + `"}
	]}`
	tenants, err := parseTokensFile([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(tenants) != 2 || tenants[0].Name != "alice" || tenants[0].Token != secretA || tenants[1].Name != "bob" {
		t.Fatalf("%+v", tenants)
	}
	if want := (spine.TenantLimits{Sessions: 10, Live: 4, HibernatedMemory: 256 << 20, DirBytes: 1 << 20}); tenants[0].Limits != want {
		t.Errorf("alice's limits %+v, want %+v", tenants[0].Limits, want)
	}
	if tenants[1].Limits != (spine.TenantLimits{}) {
		t.Errorf("bob's limits %+v, want none of his own", tenants[1].Limits)
	}
	entry := func(name, token, more string) string {
		return `{"name": "` + name + `", "token": "` + token + `"` + more + `}`
	}
	file := func(entries ...string) string { return `{"tokens": [` + strings.Join(entries, ",") + `]}` }
	for _, c := range []struct{ name, data, want string }{
		{"empty", ``, "ends early"},
		{"not JSON", `tokens: ` + secretA, "syntax error"},
		{"no tokens", `{"tokens": []}`, "no tokens"},
		{"unknown member", file(entry("a", secretA, `, "live": 3`)), `unknown field "live"`},
		{"a size as a word", file(entry("a", secretA, `, "hibernated_memory": "`+secretB+`"`)), "a size must be"},
		{"a fraction", file(entry("a", secretA, `, "hibernated_memory": "1.5GiB"`)), "a size must be"},
		{"an overflow", file(entry("a", secretA, `, "session_dir_bytes": "99999999999999GiB"`)), "a size must be"},
		{"negative", file(entry("a", secretA, `, "live_sessions": -1`)), "negative"},
		{"a number as a string", file(entry("a", secretA, `, "sessions": "`+secretB+`"`)), "must be a int"},
		{"bad name", file(entry("a b", secretA, "")), "name"},
		{"short token", file(entry("a", "short", "")), "shorter than 16"},
		{"spaced token", file(entry("a", secretA+" x", "")), "one word"},
		{"same name", file(entry("a", secretA, ""), entry("a", secretB, "")), "tokens[1] (a): the name is used twice"},
		{"same token", file(entry("a", secretA, ""), entry("b", secretA, "")), "tokens[1] (b): the same token as a"},
		{"two values", good + good, "more than one"},
	} {
		_, err := parseTokensFile([]byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secretA) || strings.Contains(err.Error(), secretB) || strings.Contains(err.Error(), "short") && c.name == "short token" && strings.Contains(err.Error(), `"short"`) {
			t.Errorf("%s: the error quotes a token: %v", c.name, err)
		}
	}
}

// TestServeTokensFile: spine serve --tokens-file accepts each token of the
// file and no other, keeps each one's sessions its own, never logs a token, and
// warns of a file others may read.
func TestServeTokensFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs spine")
	}
	bin := buildSpine(t)
	path := filepath.Join(t.TempDir(), "tokens.json")
	data := `{"tokens": [{"name": "alice", "token": "` + secretA + `", "live_sessions": 2}, {"name": "bob", "token": "` + secretB + `"}]}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var warned bytes.Buffer
	if _, err := readTokensFile(path, &warned); err != nil || !strings.Contains(warned.String(), "chmod 600") {
		t.Errorf("a file others may read: %v, warned %q", err, warned.String())
	}
	os.Chmod(path, 0o600)
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--tokens-file", path, "--live-sessions", "4", "--verbose")
	url := "http://" + addr
	send := func(method, path, token string) (int, string) { return tokenSend(t, method, url+path, token, "") }
	status, body := send("POST", "/v1/sessions", secretA)
	if status != http.StatusCreated {
		t.Fatalf("alice's session: %d %s", status, body)
	}
	id := strings.Split(body, `"`)[3]
	if status, _ := send("DELETE", "/v1/sessions/"+id, secretB); status != http.StatusNotFound {
		t.Errorf("bob deleting alice's session: %d", status)
	}
	if status, _ := send("POST", "/v1/sessions", "not-a-token-of-the-file"); status != http.StatusUnauthorized {
		t.Errorf("another token: %d", status)
	}
	if status, _ := send("DELETE", "/v1/sessions/"+id, secretA); status != http.StatusNoContent {
		t.Errorf("alice deleting her session: %d", status)
	}
	p.cmd.Process.Signal(os.Interrupt)
	var log strings.Builder
	for line := range p.lines {
		log.WriteString(line + "\n")
	}
	<-p.exited
	if strings.Contains(log.String(), secretA) || strings.Contains(log.String(), secretB) {
		t.Errorf("the log holds a token:\n%s", log.String())
	}
}

// FuzzTokensFile: whatever the file holds, parseTokensFile returns tenants
// that keep the file's rules or an error, and the error never quotes a
// token (the fuzzer's tokens hold a '~', which no message of its own has).
func FuzzTokensFile(f *testing.F) {
	f.Add([]byte(`{"tokens": [{"name": "a", "token": "~secret-0123456789", "hibernated_memory": "1MiB"}]}`))
	f.Add([]byte(`{"tokens": [{"name": "a", "token": "~secret-0123456789", "sessions": "x"}]}`))
	f.Add([]byte(`{"tokens": [{"name": "a", "token": "~secret-0123456789"}, {"name": "b", "token": "~short"}]}`))
	f.Add([]byte(`{"tokens": [{"name": "b", "token": "~two words 0123456789", "session_dir_bytes": " 7 KiB "}]}`))
	f.Add([]byte(`{"tokens": [{"name": "c", "token": "~secret-0123456789", "store_bytes": 99999999999999999999}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tenants, err := parseTokensFile(data)
		if err != nil {
			var file struct{ Tokens []json.RawMessage }
			json.Unmarshal(data, &file)
			for _, raw := range file.Tokens {
				var e struct{ Token string }
				json.Unmarshal(raw, &e)
				if strings.Contains(e.Token, "~") && bytes.Count(data, []byte(e.Token)) == 1 && strings.Contains(err.Error(), e.Token) {
					t.Fatalf("the error quotes the token %q: %v", e.Token, err)
				}
			}
			return
		}
		names, tokens := map[string]bool{}, map[string]bool{}
		for _, tn := range tenants {
			if !tenantName.MatchString(tn.Name) || names[tn.Name] || tokens[tn.Token] ||
				len(tn.Token) < minTokenLength || !oneWord(tn.Token) ||
				tn.Limits.Sessions < 0 || tn.Limits.Live < 0 {
				t.Fatalf("accepted %+v", tn)
			}
			names[tn.Name], tokens[tn.Token] = true, true
		}
	})
}
