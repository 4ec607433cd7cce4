package door

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync/atomic"
)

// Probe is the body of GET /livez and GET /readyz.
type Probe struct {
	Status string `json:"status"` // "ok" (/livez), "ready" or "draining" (/readyz)
	// Down, on /readyz, names the components of the server's health (as
	// service.Options.Health) that are down (their text is /healthz's):
	// detail only, they do not make the server unready (DownComponents).
	Down []string `json:"down,omitempty"`
}

// ServeLive answers a liveness probe: 200 "ok" while the process serves at
// all. It asks nothing of the Runner or of the tools' servers, so a
// liveness probe restarts only a process that no longer answers.
func ServeLive(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, Probe{Status: "ok"})
}

// ServeReady answers a readiness probe: 200 "ready", or 503 "draining" once
// draining is set, so that a load balancer or a Service sends new requests
// elsewhere while the ones in flight finish. spine mcp --http answers
// /readyz with it; service.Server's own drain is its Drain.
func ServeReady(draining *atomic.Bool, w http.ResponseWriter) {
	if draining.Load() {
		NoteDrained(w)
		WriteJSON(w, http.StatusServiceUnavailable, Probe{Status: "draining"})
		return
	}
	WriteJSON(w, http.StatusOK, Probe{Status: "ready"})
}

// IsProbe reports whether path is a probe's (/healthz, /livez, /readyz):
// a drain leaves it open, and the token check too, for a probe carries no
// credential; the access log makes no span of it.
func IsProbe(path string) bool {
	switch path {
	case "/healthz", "/livez", "/readyz":
		return true
	}
	return false
}

// DrainingMessage is the message of the answer to a request refused by a
// drain.
const DrainingMessage = "the server is draining (shutting down); send the request to another replica"

// RefuseWhileDraining serves next until draining is set, then answers every
// request as service.Server's drain answers those that come after it: 503,
// kind closed, with Retry-After, the connection closed, so that a load
// balancer or client sends it to another replica. spine mcp --http wraps
// its /mcp endpoint in it, beside ServeReady.
func RefuseWhileDraining(draining *atomic.Bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !draining.Load() {
			next.ServeHTTP(w, r)
			return
		}
		CloseConn(w)
		w.Header().Set("Retry-After", "1")
		NoteDrained(w)
		WriteJSON(w, http.StatusServiceUnavailable, Response{Value: json.RawMessage("null"),
			Error: &Error{Kind: KindClosed, Message: DrainingMessage}})
	})
}

// DownComponents returns the names of the components of health (service.Options.Health)
// that are not healthy, in order; nil for none. /readyz lists them as its
// detail, and stays ready: a component is a dependency every replica shares
// (an MCP server), and taking every replica out of the load balancer over it
// would stop the programs that do not need it too.
func DownComponents(health func() map[string]string) []string {
	if health == nil {
		return nil
	}
	states := health()
	var down []string
	for _, name := range slices.Sorted(maps.Keys(states)) {
		if states[name] != "" {
			down = append(down, name)
		}
	}
	return down
}
