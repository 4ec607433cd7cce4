package service

import (
	"net/http"

	"github.com/spine-run/spine/door"
)

// HealthReport is the body of GET /healthz.
type HealthReport struct {
	// Status is "ok", or "degraded" when a component is unhealthy. Either
	// way the answer is 200: the server still runs programs (those that do
	// not need the failing component), and a load balancer that took every
	// replica out over a dependency they share would stop them all.
	Status      string `json:"status"`
	Slots       int    `json:"slots"`
	SlotsBusy   int    `json:"slots_busy"`
	StreamSlots int    `json:"stream_slots"`
	StreamsBusy int    `json:"streams_busy"`
	// Components are Options.Health's, by name: "ok", or the error text
	// (cut to door.MaxLogText bytes). With Options.Token set, a request without
	// the token sees "unhealthy" instead of the text, which may name
	// internal addresses.
	Components map[string]string `json:"components,omitempty"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := HealthReport{
		Status:      "ok",
		Slots:       cap(s.slots),
		SlotsBusy:   len(s.slots),
		StreamSlots: cap(s.streams),
		StreamsBusy: len(s.streams),
	}
	if s.opts.Health != nil {
		details := s.authorized(r)
		states := s.opts.Health()
		h.Components = make(map[string]string, len(states))
		for name, problem := range states {
			switch {
			case problem == "":
				h.Components[name] = "ok"
				continue
			case details:
				h.Components[name] = door.Clip(problem)
			default:
				h.Components[name] = "unhealthy"
			}
			h.Status = "degraded"
		}
	}
	writeJSON(w, http.StatusOK, h)
}
