package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
)

// A Tenant is a client of the Server (door.Tenant): its token, a name for
// logs and its share of the Runner's sessions (Options.Tenants).
type Tenant = door.Tenant

// tenant is a token the Server accepts, with its share of the Runner.
type tenant struct {
	digest     [sha256.Size]byte
	owner      string // digest in hex: the owner of its sessions (door.Owner)
	name       string
	share      *spine.Tenant // nil: the Server has one token, whose share is the Runner
	storeBytes int64         // its cap in the session store; 0: none
}

// newTenants returns the Server's tokens as tenants: Options.Token (named
// "default"), Options.Tokens (token-1, token-2, … in that order) and then
// Options.Tenants.
func newTenants(runner *spine.Runner, o *Options) []*tenant {
	var given []Tenant
	if o.Token != "" {
		given = append(given, Tenant{Name: "default", Token: o.Token})
	}
	for i, token := range o.Tokens {
		if token != "" {
			given = append(given, Tenant{Name: fmt.Sprintf("token-%d", i+1), Token: token})
		}
	}
	given = append(given, o.Tenants...)
	if len(given) == 0 {
		return nil
	}
	if len(given) == 1 && given[0].Limits == (spine.TenantLimits{}) {
		return []*tenant{newTenant(given[0], nil)}
	}
	shares := door.Shares(given, runner.Options().Sessions, o.SessionsPerToken)
	out := make([]*tenant, 0, len(given))
	for i, g := range given {
		out = append(out, newTenant(g, runner.NewTenant(g.Name, shares[i])))
	}
	return out
}

// newTenant is t as the Server keeps it, with its share of the Runner.
func newTenant(t Tenant, share *spine.Tenant) *tenant {
	digest := sha256.Sum256([]byte(t.Token))
	return &tenant{digest: digest, owner: t.Owner(), name: t.Name, share: share, storeBytes: storeCap(t)}
}

// storeCap is t's StoreBytes as a store's limit.
func storeCap(t Tenant) int64 { return int64(min(t.StoreBytes, math.MaxInt64)) }

// shareOf returns the share of the tenant whose token's digest in hex is
// owner (package fleet's owner): its name, its share of the Runner, its
// sessions (Options.SessionsPerToken) and its store cap.
func (s *Server) shareOf(owner string) fleet.Share {
	share := fleet.Share{Sessions: s.opts.SessionsPerToken}
	for _, t := range s.tenants {
		if t.owner == owner {
			share.Name, share.StoreBytes = t.name, t.storeBytes
			if t.share != nil {
				share.Tenant = t.share
			}
			return share
		}
	}
	return share
}

// identify returns the tenant whose token r carries; nil when it carries
// none of them. Every token is compared, in constant time.
func (s *Server) identify(r *http.Request) *tenant {
	got, ok := door.BearerDigest(r)
	var found *tenant
	for _, t := range s.tenants {
		if subtle.ConstantTimeCompare(got[:], t.digest[:]) == 1 {
			found = t
		}
	}
	if !ok {
		return nil
	}
	return found
}
