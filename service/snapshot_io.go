package service

import (
	"net/http"
)

// A snapshot streams between a request and the session's Guest
// (spine.Session.SnapshotTo, spine.Runner.RestoreFrom).

// snapshotAnswer is the answer to GET /v1/sessions/{id}/snapshot: its
// headers and status go out with the snapshot's first bytes, so that a
// snapshot refused before it starts (files open, say) is answered with an
// error instead.
type snapshotAnswer struct {
	w       http.ResponseWriter
	started bool
}

func (a *snapshotAnswer) Write(p []byte) (int, error) {
	if !a.started {
		a.started = true
		h := a.w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "no-store") // it holds what the session's programs saw
		h.Set("X-Content-Type-Options", "nosniff")
		a.w.WriteHeader(http.StatusOK)
	}
	return a.w.Write(p)
}
