package service

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spine-run/spine"
)

// probePaths are the paths a request without the token may GET: the
// health of the process, for load balancers and Kubernetes' probes.
var probePaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true}

// Probe is the body of GET /livez and GET /readyz.
type Probe struct {
	Status string `json:"status"` // "ok", or "draining" (/readyz only)
}

// handleLive answers GET /livez: 200 while the process serves at all. It
// asks nothing of the Runner or of the tools' servers, so a liveness probe
// restarts only a process that no longer answers.
func handleLive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Probe{Status: "ok"})
}

// handleReady answers GET /readyz: 200 while the Server takes new work,
// 503 "draining" once SetDraining(true), so a load balancer or a Service
// sends new requests elsewhere while the ones in flight finish.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ServeReady(&s.draining, w)
}

// ServeReady answers a readiness probe from draining: 200 "ok", or 503
// "draining" when it is set. spine mcp --http answers /readyz with it.
func ServeReady(draining *atomic.Bool, w http.ResponseWriter) {
	if draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, Probe{Status: "draining"})
		return
	}
	writeJSON(w, http.StatusOK, Probe{Status: "ok"})
}

// ServeLive answers a liveness probe: 200 "ok".
func ServeLive(w http.ResponseWriter, r *http.Request) { handleLive(w, r) }

// SetDraining says whether the Server is draining: GET /readyz answers 503
// while it is. The runs it admits are unchanged; a drain that stops
// admitting is the caller's (http.Server.Shutdown stops accepting).
func (s *Server) SetDraining(draining bool) { s.draining.Store(draining) }

// Draining reports what SetDraining last said.
func (s *Server) Draining() bool { return s.draining.Load() }

// RunnerCollector returns a Prometheus collector of runner's Stats (the
// pool, the sessions), as the Server's /metrics exports them, for other
// handlers over a Runner (spine mcp --http).
func RunnerCollector(runner *spine.Runner) prometheus.Collector {
	return runnerCollector{runner}
}
