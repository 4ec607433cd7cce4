package door_test

import (
	"net/http"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestTenants: a request is identified by its bearer token among the
// tenants' (the scheme's case aside, nothing else), and each owner gets its
// own share: its name, its store cap, the sessions cap given, and a share
// of the Runner, which one token without limits does not need.
func TestTenants(t *testing.T) {
	r := spinetest.NewRunner(t, nil, &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Max: 8, MaxLive: 4}})
	given := []door.Tenant{
		{Name: "a", Token: "token-a", StoreBytes: 1 << 20},
		{Name: "b", Token: "token-b", Limits: spine.TenantLimits{Live: 3}},
	}
	ts := door.NewTenants(r, given, 5)
	request := func(auth string) *http.Request {
		req, _ := http.NewRequest("GET", "/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return req
	}
	for auth, want := range map[string]string{"Bearer token-a": "a", "bearer token-b": "b", "Bearer token-b ": "b",
		"": "", "Bearer token-c": "", "Basic token-a": "", "Bearer token-a2": "", "Bearer": ""} {
		owner, share, ok := ts.Identify(request(auth))
		if ok != (want != "") || share.Name != want {
			t.Errorf("%q: %q, %v; want %q", auth, share.Name, ok, want)
		}
		if ok && owner != given[map[string]int{"a": 0, "b": 1}[want]].Owner() {
			t.Errorf("%q: owner %s", auth, owner)
		}
	}
	a, b := ts.ShareOf(given[0].Owner()), ts.ShareOf(given[1].Owner())
	if a.Name != "a" || a.StoreBytes != 1<<20 || a.Sessions != 5 || a.Tenant == nil || b.StoreBytes != 0 || b.Tenant == nil || a.Tenant == b.Tenant {
		t.Errorf("shares %+v, %+v", a, b)
	}
	if stranger := ts.ShareOf("someone"); stranger.Tenant != nil || stranger.Sessions != 5 || stranger.Name != "" {
		t.Errorf("an owner of no tenant: %+v", stranger)
	}
	if one := door.NewTenants(r, given[:1], 0).ShareOf(given[0].Owner()); one.Tenant != nil || one.StoreBytes != 1<<20 {
		t.Errorf("one token without limits: %+v, want the whole Runner", one)
	}
	var none *door.Tenants
	if _, _, ok := none.Identify(request("Bearer token-a")); ok || none.Len() != 0 || none.ShareOf("x").Tenant != nil {
		t.Error("a nil Tenants takes a token")
	}
}
