package door

import (
	"github.com/spine-run/spine"
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
