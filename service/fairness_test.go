package service_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// TestTenantCannotTakeAnothersShare: one token filling its share of the
// Runner's sessions — incompressible sessions that fill the hibernated
// memory, then sessions that cannot hibernate and so hold every live place —
// leaves the other token's share alone: its sessions are made, run and wake
// as if the first token were not there, and the first token's requests past
// its share are refused (503 too_many_sessions), not the other's.
func TestTenantCannotTakeAnothersShare(t *testing.T) {
	if testing.Short() {
		t.Skip("a Runner of its own, with sessions of a few MiB each")
	}
	r := spinetest.NewRunner(t, tools.Manifest(), &spine.Options{PoolSize: 1, Sessions: spine.SessionOptions{
		MaxLive:          4,
		HibernatedMemory: 8 << 20,
		Idle:             -1, // hibernation only to make room
	}})
	_, ts := newSessionServer(t, r, &service.Options{Token: "token-a", Tokens: []string{"token-b"}, SessionsPerToken: 16})
	a := client{t: t, url: ts.URL, token: "token-a"}
	b := client{t: t, url: ts.URL, token: "token-b"}

	// A fills everything it can: each session holds 3 MiB of random bytes,
	// whose snapshot does not compress.
	refused := 0
	for range 10 {
		status, raw, _ := a.send("POST", "/v1/sessions", "", nil)
		if status != http.StatusCreated {
			wantError(t, "a's session past its share", status, a.answer(status, raw), http.StatusServiceUnavailable, "too_many_sessions")
			refused++
			continue
		}
		id := infoID(t, raw)
		if status, out := a.run(id, "import os; x = os.urandom(3 << 20); len(x)"); status != http.StatusOK {
			wantError(t, "a's run past its share", status, out, http.StatusServiceUnavailable, "too_many_sessions")
			refused++
		}
	}
	if refused == 0 {
		t.Error("token a was never refused: its share is the whole Runner")
	}

	// B still has its share: sessions to make, run, hibernate and wake.
	var ids []string
	for i := range 3 {
		status, raw, _ := b.send("POST", "/v1/sessions", "", nil)
		if status != http.StatusCreated {
			t.Fatalf("b's session %d: status %d, %s", i, status, raw)
		}
		id := infoID(t, raw)
		if v := b.mustRun(id, "import os; y = os.urandom(1 << 20); len(y)"); v != "1048576" {
			t.Fatalf("b's run: %s", v)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if v := b.mustRun(id, "len(y)"); v != "1048576" {
			t.Fatalf("b's session woken: %s", v)
		}
	}
}

// infoID returns the id in the answer to a create or a restore.
func infoID(t *testing.T, raw []byte) string {
	t.Helper()
	var info service.SessionInfo
	if err := json.Unmarshal(raw, &info); err != nil || info.ID == "" {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return info.ID
}

// TestSessionsShareLeftOut: a token with no sessions cap of its own gets an
// even share of the Runner's Max, as of its other limits: it cannot take
// every place and leave the other token none (issue 34.6).
func TestSessionsShareLeftOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a Runner of its own")
	}
	r := spinetest.NewRunner(t, nil, &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Max: 4, MaxLive: 4, Idle: -1}})
	_, ts := newSessionServer(t, r, &service.Options{Tenants: []service.Tenant{
		{Name: "a", Token: "token-a"},
		{Name: "b", Token: "token-b", Limits: spine.TenantLimits{Live: 2}},
	}})
	a := client{t: t, url: ts.URL, token: "token-a"}
	b := client{t: t, url: ts.URL, token: "token-b"}
	made := 0
	for range 4 {
		status, raw, _ := a.send("POST", "/v1/sessions", "", nil)
		if status != http.StatusCreated {
			wantError(t, "a's session past its share", status, a.answer(status, raw), http.StatusServiceUnavailable, "too_many_sessions")
			continue
		}
		made++
	}
	if made != 2 {
		t.Errorf("token a made %d sessions of the Runner's 4, want its share of 2", made)
	}
	for i := range 2 {
		status, raw, _ := b.send("POST", "/v1/sessions", "", nil)
		if status != http.StatusCreated {
			t.Fatalf("b's session %d: status %d, %s", i, status, raw)
		}
	}
}
