package service

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spine-run/spine"
)

// Probe is the body of GET /livez and GET /readyz.
type Probe struct {
	Status string `json:"status"` // "ok" (/livez), "ready" or "draining" (/readyz)
	// Down, on /readyz, names the components of Options.Health that are
	// down (their text is /healthz's): detail only, they do not make the
	// server unready (DownComponents).
	Down []string `json:"down,omitempty"`
}

// ServeLive answers a liveness probe: 200 "ok" while the process serves at
// all. It asks nothing of the Runner or of the tools' servers, so a
// liveness probe restarts only a process that no longer answers.
func ServeLive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Probe{Status: "ok"})
}

// ServeReady answers a readiness probe: 200 "ready", or 503 "draining" once
// draining is set, so that a load balancer or a Service sends new requests
// elsewhere while the ones in flight finish. spine mcp --http answers
// /readyz with it; the Server's own drain is Drain (drain.go).
func ServeReady(draining *atomic.Bool, w http.ResponseWriter) {
	if draining.Load() {
		noteDrained(w)
		writeJSON(w, http.StatusServiceUnavailable, Probe{Status: "draining"})
		return
	}
	writeJSON(w, http.StatusOK, Probe{Status: "ready"})
}

// RefuseWhileDraining serves next until draining is set, then answers every
// request as the Server's drain answers those that come after it (Drain):
// 503, kind closed, with Retry-After, the connection closed, so that a load
// balancer or client sends it to another replica. spine mcp --http wraps
// its /mcp endpoint in it, beside ServeReady.
func RefuseWhileDraining(draining *atomic.Bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !draining.Load() {
			next.ServeHTTP(w, r)
			return
		}
		closeConn(w)
		w.Header().Set("Retry-After", "1")
		noteDrained(w)
		writeJSON(w, http.StatusServiceUnavailable, Response{Value: json.RawMessage("null"),
			Error: &Error{Kind: kindClosed, Message: drainingMessage}})
	})
}

// RunnerCollector returns a Prometheus collector of runner's Stats (the
// pool, the sessions), as the Server's /metrics exports them, for other
// handlers over a Runner (spine mcp --http).
func RunnerCollector(runner *spine.Runner) prometheus.Collector {
	return runnerCollector{runner}
}
