package service

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine/mcpclient"
)

// A run request's "mcp_servers" are MCP servers the run reaches over
// streamable HTTP (mcpclient.Remotes): their tools are the run's, as
// name.tool, beside the Runner's and the request's client tools. They are
// a way out of the Host, so the operator names the hosts they may be on
// (Options.MCPAllow); none by default. Each run connects on its own and
// closes its sessions when it ends, so that nothing of one request, its
// headers least of all, serves another's, another token's included. The
// servers are connected, and their tools listed, before the run is
// admitted and the Guest taken, at most Slots requests at once, each
// token an even share of them (more get 429); a server that cannot be reached or lists nothing is 502
// mcp_server, naming it, and the run does not start.

// kindMCPServer is the error kind of a request whose MCP server failed.
const kindMCPServer = "mcp_server"

// remoteServers are the Server's side of mcp_servers.
type remoteServers struct {
	remotes *mcpclient.Remotes // nil: Options.MCPAllow is empty
	places  int                // requests connecting at once: Slots

	mu      sync.Mutex
	opening int            // requests connecting
	byOwner map[string]int // of them, each token's
}

// newRemoteServers makes the Server's remoteServers from o; it panics on
// an entry of o.MCPAllow that mcpclient.ParseAllowList refuses.
func newRemoteServers(o *Options) *remoteServers {
	allow, err := mcpclient.ParseAllowList(o.MCPAllow)
	if err != nil {
		panic("service: Options.MCPAllow: " + err.Error())
	}
	rs := &remoteServers{places: o.Slots, byOwner: map[string]int{}}
	if !allow.Empty() {
		rs.remotes = mcpclient.NewRemotes(&mcpclient.RemoteOptions{Allow: allow})
	}
	return rs
}

// enter takes a place for a request of owner to connect to its servers,
// or says why not: every place is taken, or the owner's share of them
// (with several tokens, an even share, at least 1), so that a token whose
// servers are slow holds up its own requests only.
func (rs *remoteServers) enter(owner string, tokens int) string {
	share := rs.places
	if tokens > 1 {
		share = max(1, share/tokens)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case rs.opening >= rs.places:
		return fmt.Sprintf("%d requests are connecting to their mcp_servers, the limit; try again later", rs.places)
	case rs.byOwner[owner] >= share:
		return fmt.Sprintf("this token has %d requests connecting to their mcp_servers, its share; try again later", share)
	}
	rs.opening++
	rs.byOwner[owner]++
	return ""
}

// leave gives back owner's place.
func (rs *remoteServers) leave(owner string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.opening--
	if rs.byOwner[owner]--; rs.byOwner[owner] == 0 {
		delete(rs.byOwner, owner)
	}
}

// openRemotes opens servers for a run whose client tools are tools, or
// answers why not and returns false. It returns nil for no servers.
func (s *pausedDesk) openRemotes(w http.ResponseWriter, r *http.Request, start time.Time, servers []mcpclient.Remote, tools []ClientTool) (*mcpclient.RemoteTools, bool) {
	if len(servers) == 0 {
		return nil, true
	}
	remotes := s.remote.remotes
	if remotes == nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, `this server takes no "mcp_servers": its operator allows no host for them (spine serve --mcp-allow)`)
		return nil, false
	}
	if err := remotes.Check(servers); err != nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, remoteMessage(err))
		return nil, false
	}
	if _, err := checkClientTools(tools, nil); err != nil {
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, err.Error())
		return nil, false
	}
	for i, t := range tools {
		for _, srv := range servers {
			if t.Name == srv.Name || strings.HasPrefix(t.Name, srv.Name+".") {
				s.refuse(w, start, http.StatusBadRequest, kindBadRequest, fmt.Sprintf(`tools[%d] (%s) is in the namespace of mcp_servers' %s, whose tools are %s.*`, i, t.Name, srv.Name, srv.Name))
				return nil, false
			}
		}
	}
	owner := s.owner(r)
	if refused := s.remote.enter(owner, s.tenants.Len()); refused != "" {
		w.Header().Set("Retry-After", "1")
		s.refuse(w, start, http.StatusTooManyRequests, kindOverloaded, refused)
		return nil, false
	}
	defer s.remote.leave(owner)
	opened, err := remotes.Open(r.Context(), servers)
	var re *mcpclient.RemoteError
	switch {
	case err == nil:
		return opened, true
	case r.Context().Err() != nil:
		s.refuse(w, start, statusClientClosed, kindCanceled, "the client went away")
	case errors.As(err, &re) && re.Refused:
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, remoteMessage(err))
	default:
		s.refuse(w, start, http.StatusBadGateway, kindMCPServer, remoteMessage(err))
	}
	return nil, false
}

// remoteMessage is the text of an error of mcpclient.Remotes, naming the
// entry of mcp_servers at fault.
func remoteMessage(err error) string {
	var re *mcpclient.RemoteError
	if errors.As(err, &re) && re.Index >= 0 {
		return fmt.Sprintf("mcp_servers[%d]: %v", re.Index, err)
	}
	return "mcp_servers: " + err.Error()
}

// closeRemote closes the sessions of a run's mcp_servers once it has
// ended, without holding up its answer: the close of each session is an
// HTTP DELETE, which the MCP SDK bounds by 5s.
func closeRemote(remote *mcpclient.RemoteTools) {
	if remote != nil {
		go remote.Close()
	}
}
