package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// A Tenant is a client of the Server: its token, a name for logs (never the
// token), and its share of the Runner's sessions. A zero field of Limits is
// an even share: the Runner's limit (spine.SessionOptions: Max, MaxLive,
// HibernatedMemory, DirBytes) divided by the number of tokens the Server
// has, so that with several tokens none can take another's share (Shares);
// Sessions 0 is Options.SessionsPerToken when that is positive.
//
// StoreBytes, when positive, caps the bytes the token's sessions keep in
// Options.SessionStore, each counted at its newest snapshot's size, across
// every replica on the store: a write past it is refused as a snapshot over
// MaxSnapshot is (409 too_large, the run undone). 0 is no cap: the store
// has no total of its own to share.
type Tenant struct {
	Name       string
	Token      string
	Limits     spine.TenantLimits
	StoreBytes uint64
}

// tenant is a token the Server accepts, with its share of the Runner.
type tenant struct {
	digest     [sha256.Size]byte
	owner      string // digest in hex: the owner of its sessions (sessionstore.OwnerOf)
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
	shares := Shares(given, runner.Options().Sessions, o.SessionsPerToken)
	out := make([]*tenant, 0, len(given))
	for i, g := range given {
		out = append(out, newTenant(g, runner.NewTenant(g.Name, shares[i])))
	}
	return out
}

// Shares returns the share of a Runner whose SessionOptions are so that
// each of tenants gets from a Server: its Limits, a zero field filled with
// an even share of the Runner's, the Runner's limit divided by the number
// of tokens (1 at least for Sessions and Live); Sessions with
// sessionsPerToken first, when positive (Options.SessionsPerToken). With
// more tokens than the Runner has places (or limits given that add up to
// more than it has), the shares add up to more than the Runner: one token
// filling its share can take another's, which spine serve warns of.
func Shares(tenants []Tenant, so spine.SessionOptions, sessionsPerToken int) []spine.TenantLimits {
	n := len(tenants)
	out := make([]spine.TenantLimits, n)
	for i, t := range tenants {
		l := t.Limits
		if l.Sessions == 0 {
			l.Sessions = sessionsPerToken
		}
		if l.Sessions == 0 {
			l.Sessions = max(1, so.Max/n)
		}
		if l.Live == 0 {
			l.Live = max(1, so.MaxLive/n)
		}
		if l.HibernatedMemory == 0 {
			l.HibernatedMemory = so.HibernatedMemory / uint64(n)
		}
		if l.DirBytes == 0 {
			l.DirBytes = so.DirBytes / uint64(n)
		}
		out[i] = l
	}
	return out
}

// newTenant is t as the Server keeps it, with its share of the Runner.
func newTenant(t Tenant, share *spine.Tenant) *tenant {
	digest := sha256.Sum256([]byte(t.Token))
	return &tenant{digest: digest, owner: sessionstore.OwnerOf(digest), name: t.Name, share: share, storeBytes: storeCap(t)}
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
	got, ok := bearerDigest(r)
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
