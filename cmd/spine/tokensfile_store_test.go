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
	"github.com/spine-run/spine/service"
)

// TestTokensFileStoreBytes: store_bytes takes the sizes hibernated_memory
// and session_dir_bytes take, is no cap when left out, and a bad value is
// refused with the entry's place and name, quoting nothing of the file.
func TestTokensFileStoreBytes(t *testing.T) {
	tenants, err := parseTokensFile([]byte(`{"tokens": [
		{"name": "alice", "token": "` + secretA + `", "store_bytes": "1GiB", "hibernated_memory": 4096},
		{"name": "bob", "token": "` + secretB + `", "store_bytes": 1048576}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tenants[0].StoreBytes != 1<<30 || tenants[1].StoreBytes != 1<<20 || tenants[0].Limits != (spine.TenantLimits{HibernatedMemory: 4096}) {
		t.Fatalf("%+v", tenants)
	}
	good := `{"name": "alice", "token": "` + secretA + `"}`
	for _, c := range []struct{ name, entry, want string }{
		{"a fraction", `{"name": "bob", "token": "` + secretB + `", "store_bytes": "1.5GiB"}`, `tokens[1] (bob): a size must be`},
		{"negative", `{"name": "bob", "token": "` + secretB + `", "store_bytes": -1}`, `tokens[1] (bob): a size must be`},
		{"a word", `{"name": "bob", "token": "` + secretB + `", "store_bytes": "` + secretA + `"}`, `tokens[1] (bob): a size must be`},
		{"an overflow", `{"name": "bob", "token": "` + secretB + `", "store_bytes": "9999999999GiB"}`, `tokens[1] (bob): a size must be`},
		{"an unknown unit", `{"name": "bob", "token": "` + secretB + `", "store_bytes": "1GB"}`, `tokens[1] (bob): a size must be`},
		{"before its name", `{"store_bytes": "lots", "token": "` + secretB + `"}`, `tokens[1]: a size must be`},
		{"not an object", `"` + secretB + `"`, `tokens[1]: an entry must be an object`},
		{"a misspelt member", `{"name": "bob", "token": "` + secretB + `", "store_byte": 1}`, `tokens[1] (bob): unknown field "store_byte"`},
		{"a member of the wrong type", `{"name": "bob", "token": "` + secretB + `", "sessions": "` + secretA + `"}`, `tokens[1] (bob): sessions must be a int`},
	} {
		_, err := parseTokensFile([]byte(`{"tokens": [` + good + `, ` + c.entry + `]}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secretA) || strings.Contains(err.Error(), secretB) {
			t.Errorf("%s: the error quotes a token: %v", c.name, err)
		}
	}
	var warned bytes.Buffer
	checkShares("spine serve", tenants, spine.SessionOptions{MaxLive: 8, HibernatedMemory: 1 << 30}, false, &warned)
	if !strings.Contains(warned.String(), `token "alice" has a store_bytes, which only a --session-store uses`) {
		t.Errorf("no warning of store_bytes without a store: %q", warned.String())
	}
	warned.Reset()
	checkShares("spine serve", tenants, spine.SessionOptions{MaxLive: 8, HibernatedMemory: 1 << 30}, true, &warned)
	if warned.Len() != 0 {
		t.Errorf("warned with a store: %q", warned.String())
	}
}

// TestServeTokensFileStoreBytes: spine serve with a store and a tokens file
// whose tokens each may keep 4 MiB there: the token that fills its
// store_bytes has its next growing run answered 409 too_large and undone,
// while the other token's sessions still store and load, on a second
// process of the same store.
func TestServeTokensFileStoreBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs spine")
	}
	bin := buildSpine(t)
	path := filepath.Join(t.TempDir(), "tokens.json")
	data := `{"tokens": [{"name": "alice", "token": "` + secretA + `", "store_bytes": "4MiB"}, {"name": "bob", "token": "` + secretB + `", "store_bytes": "4MiB"}]}`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--session-memory", "128", "--tokens-file", path, "--session-store", "file://" + t.TempDir()}
	one, addr1 := start(t, bin, args...)
	two, addr2 := start(t, bin, args...)
	url1, url2 := "http://"+addr1, "http://"+addr2

	const grow = "import os\nblob = os.urandom(3_000_000)\nlen(blob)"
	a1 := tokenSession(t, url1, secretA)
	if status, body := tokenRun(t, url1, secretA, a1, grow); status != http.StatusOK || !strings.Contains(body, `"value":3000000`) {
		t.Fatalf("alice's first session: %d %s", status, body)
	}
	a2 := tokenSession(t, url2, secretA)
	status, body := tokenRun(t, url2, secretA, a2, grow)
	if status != http.StatusConflict || !strings.Contains(body, `"too_large"`) || !strings.Contains(body, "store_bytes") {
		t.Fatalf("alice past her store_bytes: %d %s", status, body)
	}
	if status, body := tokenRun(t, url1, secretA, a2, "'blob' in dir()"); status != http.StatusOK || !strings.Contains(body, `"value":false`) {
		t.Fatalf("the refused run, on the other process: %d %s", status, body)
	}
	b1 := tokenSession(t, url2, secretB)
	if status, body := tokenRun(t, url2, secretB, b1, grow); status != http.StatusOK {
		t.Fatalf("bob's session: %d %s", status, body)
	}
	if status, body := tokenRun(t, url1, secretB, b1, "len(blob)"); status != http.StatusOK || !strings.Contains(body, `"value":3000000`) {
		t.Fatalf("bob's session on the other process: %d %s", status, body)
	}
	one.stop(t)
	two.stop(t)
}

// tokenSession makes a session at url with token and returns its id.
func tokenSession(t *testing.T, url, token string) string {
	t.Helper()
	status, body := tokenSend(t, "POST", url+"/v1/sessions", token, "")
	var info struct{ ID string }
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &info) != nil || info.ID == "" {
		t.Fatalf("POST /v1/sessions: %d %s", status, body)
	}
	return info.ID
}

// tokenRun runs source in session id at url with token.
func tokenRun(t *testing.T, url, token, id, source string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"source": source})
	return tokenSend(t, "POST", url+"/v1/sessions/"+id+"/run", token, string(body))
}

// tokenSend sends a request with token and returns the status and body.
func tokenSend(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.String()
}

// TestCheckSharesLeftOut: the shares are checked as the server makes them,
// a limit left out an even share: more tokens than --live-sessions
// overcommit the live places (each has one), and a sessions given to one
// token past what the others' even shares leave overcommits --sessions
// (issue 34.6).
func TestCheckSharesLeftOut(t *testing.T) {
	so := spine.SessionOptions{Max: 100, MaxLive: 2, HibernatedMemory: 1 << 30}
	three := []service.Tenant{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	var warned bytes.Buffer
	checkShares("spine serve", three, so, false, &warned)
	if want := "the tokens' live_sessions add up to 3, over the server's 2 (--live-sessions)"; !strings.Contains(warned.String(), want) {
		t.Errorf("warned %q, want %q", warned.String(), want)
	}
	warned.Reset()
	so.MaxLive = 6
	checkShares("spine serve", three, so, false, &warned)
	if warned.Len() != 0 {
		t.Errorf("even shares warned: %q", warned.String())
	}
	three[0].Limits.Sessions = 90 // b and c: 33 each
	checkShares("spine serve", three, so, false, &warned)
	if want := "the tokens' sessions add up to 156, over the server's 100 (--sessions)"; !strings.Contains(warned.String(), want) {
		t.Errorf("warned %q, want %q", warned.String(), want)
	}
}
