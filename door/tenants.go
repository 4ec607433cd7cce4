package door

import (
	"crypto/sha256"
	"crypto/subtle"
	"math"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// A Tenant is a client of a front door (service.Options.Tenants, spine mcp
// --http's tokens file): its token, a name for logs (never the token), and
// its share of the Runner's sessions (a spine.Tenant made with Limits). A
// zero field of Limits is an even share: the Runner's limit
// (spine.SessionOptions: Max, MaxLive, HibernatedMemory, DirBytes) divided
// by the number of tokens the server has, so that with several tokens none
// can take another's share (Shares); Sessions 0 is
// service.Options.SessionsPerToken when that is positive.
//
// StoreBytes, when positive, caps the bytes the token's sessions (and its
// paused runs kept there: service) keep in the session store, each counted
// at its newest snapshot's size, across
// every replica on the store: a write past it is refused as a snapshot over
// the snapshot cap is (service: 409 too_large, the run undone). 0 is no
// cap: the store has no total of its own to share.
type Tenant struct {
	Name       string
	Token      string
	Limits     spine.TenantLimits
	StoreBytes uint64
}

// Owner is the owner of the sessions made with t's token (Owner).
func (t Tenant) Owner() string { return sessionstore.Owner(t.Token) }

// Shares returns the share of a Runner whose SessionOptions are so that
// each of tenants gets from a front door: its Limits, a zero field filled with
// an even share of the Runner's, the Runner's limit divided by the number
// of tokens (1 at least for Sessions and Live); Sessions with
// sessionsPerToken first, when positive (service.Options.SessionsPerToken). With
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

// Tenants are a front door's Tenants as it serves them: each one's token,
// compared by its SHA-256 digest, the owner its sessions are keyed by
// (Owner), and its share (fleet.Share): of the Runner's sessions, a
// spine.Tenant made with Shares' limits; of the door's sessions; of the
// store. Both front doors resolve theirs with NewTenants, so a tokens file
// means the same to either.
type Tenants struct {
	list     []client
	perToken int // Share.Sessions of every owner (service.Options.SessionsPerToken)
}

// client is one Tenant resolved.
type client struct {
	digest [sha256.Size]byte
	owner  string
	share  fleet.Share
}

// NewTenants resolves given for a front door over runner. One tenant
// without limits of its own shares the whole Runner (its Share.Tenant is
// nil); otherwise each gets runner.NewTenant with its Shares limits, so
// that none can take another's share. sessionsPerToken, when positive, is
// every owner's Share.Sessions (and Shares' default of Limits.Sessions).
// A nil runner gives no shares of a Runner (RequireToken). An empty
// token is a programming error: it panics.
func NewTenants(runner *spine.Runner, given []Tenant, sessionsPerToken int) *Tenants {
	ts := &Tenants{perToken: sessionsPerToken}
	var limits []spine.TenantLimits
	if runner != nil && (len(given) > 1 || len(given) == 1 && given[0].Limits != (spine.TenantLimits{})) {
		limits = Shares(given, runner.Options().Sessions, sessionsPerToken)
	}
	for i, t := range given {
		if t.Token == "" {
			panic("door: a tenant with an empty token")
		}
		c := client{digest: sha256.Sum256([]byte(t.Token)), owner: t.Owner(),
			share: fleet.Share{Name: t.Name, Sessions: sessionsPerToken, StoreBytes: int64(min(t.StoreBytes, math.MaxInt64))}}
		if limits != nil {
			c.share.Tenant = runner.NewTenant(t.Name, limits[i])
		}
		ts.list = append(ts.list, c)
	}
	return ts
}

// Len is the number of tokens; 0 (and for a nil *Tenants): the door takes
// requests without one.
func (ts *Tenants) Len() int {
	if ts == nil {
		return 0
	}
	return len(ts.list)
}

// Identify returns the owner and share of the tenant whose token r
// carries, and false when it carries none of them. Every token is
// compared, in constant time.
func (ts *Tenants) Identify(r *http.Request) (owner string, share fleet.Share, ok bool) {
	if ts.Len() == 0 {
		return "", fleet.Share{}, false
	}
	got, bearer := BearerDigest(r)
	found := -1
	for i := range ts.list {
		if subtle.ConstantTimeCompare(got[:], ts.list[i].digest[:]) == 1 && bearer {
			found = i
		}
	}
	if found < 0 {
		return "", fleet.Share{}, false
	}
	return ts.list[found].owner, ts.list[found].share, true
}

// ShareOf returns the share of the tenant whose owner is owner (package
// fleet's Options.ShareOf); an owner of no tenant (a door without tokens)
// has only Share.Sessions.
func (ts *Tenants) ShareOf(owner string) fleet.Share {
	if ts == nil {
		return fleet.Share{}
	}
	for _, c := range ts.list {
		if c.owner == owner {
			return c.share
		}
	}
	return fleet.Share{Sessions: ts.perToken}
}
