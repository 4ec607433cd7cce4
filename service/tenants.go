package service

import (
	"fmt"

	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
)

// A Tenant is a client of the Server (door.Tenant): its token, a name for
// logs and its share of the Runner's sessions (Options.Tenants).
type Tenant = door.Tenant

// tenantsOf returns the tokens o gives: Options.Token (named "default"),
// Options.Tokens (token-1, token-2, … in that order) and then
// Options.Tenants.
func tenantsOf(o *Options) []Tenant {
	var given []Tenant
	if o.Token != "" {
		given = append(given, Tenant{Name: "default", Token: o.Token})
	}
	for i, token := range o.Tokens {
		if token != "" {
			given = append(given, Tenant{Name: fmt.Sprintf("token-%d", i+1), Token: token})
		}
	}
	return append(given, o.Tenants...)
}

// shareOf returns owner's share (door.Tenants.ShareOf): its name, its
// share of the Runner, its sessions (Options.SessionsPerToken) and its
// store cap.
func (s *Server) shareOf(owner string) fleet.Share { return s.tenants.ShareOf(owner) }
