package service

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/spine-run/spine"
)

// A Tenant is a client of the Server: its token, a name for logs (never the
// token), and its share of the Runner's sessions. A zero field of Limits is
// an even share: the Runner's limit (spine.SessionOptions: MaxLive,
// HibernatedMemory, DirBytes) divided by the number of tokens the Server
// has, so that with several tokens none can take another's share; Sessions
// 0 is Options.SessionsPerToken.
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
		return []*tenant{{digest: sha256.Sum256([]byte(given[0].Token)), name: given[0].Name, storeBytes: storeCap(given[0])}}
	}
	so := runner.Options().Sessions
	n := len(given)
	out := make([]*tenant, 0, n)
	for _, g := range given {
		l := g.Limits
		if l.Sessions == 0 {
			l.Sessions = o.SessionsPerToken
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
		out = append(out, &tenant{digest: sha256.Sum256([]byte(g.Token)), name: g.Name, share: runner.NewTenant(g.Name, l), storeBytes: storeCap(g)})
	}
	return out
}

// storeCap is t's StoreBytes as a store's limit.
func storeCap(t Tenant) int64 { return int64(min(t.StoreBytes, math.MaxInt64)) }

// storeLimit returns the name and the store cap of the tenant whose token's
// digest is owner; limit 0 is none.
func (s *Server) storeLimit(owner [sha256.Size]byte) (name string, limit int64) {
	for _, t := range s.tenants {
		if t.digest == owner {
			return t.name, t.storeBytes
		}
	}
	return "", 0
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

// tenantKey is the context key of the tenant a request was authorized as.
type tenantKey struct{}

// requestTenant is the tenant r was authorized as, nil without tokens.
func requestTenant(r *http.Request) *tenant {
	t, _ := r.Context().Value(tenantKey{}).(*tenant)
	return t
}

// newSession makes a session in r's tenant's share.
func (s *Server) newSession(ctx context.Context, r *http.Request) (*spine.Session, error) {
	if t := requestTenant(r); t != nil && t.share != nil {
		return t.share.NewSession(ctx)
	}
	return s.runner.NewSession(ctx)
}

// restoreSession restores a session from the snapshot rd reads, in r's
// tenant's share.
func (s *Server) restoreSession(ctx context.Context, r *http.Request, rd io.Reader) (*spine.Session, error) {
	if t := requestTenant(r); t != nil && t.share != nil {
		return t.share.RestoreFrom(ctx, rd)
	}
	return s.runner.RestoreFrom(ctx, rd)
}

// restoreFor restores a session from the snapshot rd reads in the share of
// the tenant whose token's digest is owner (a session loaded from the store).
func (s *Server) restoreFor(ctx context.Context, owner [sha256.Size]byte, rd io.Reader) (*spine.Session, error) {
	for _, t := range s.tenants {
		if t.digest == owner && t.share != nil {
			return t.share.RestoreFrom(ctx, rd)
		}
	}
	return s.runner.RestoreFrom(ctx, rd)
}
