package service

import (
	"errors"
	"io"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// Sessions in a store (Options.SessionStore; docs/scaling.md, and
// docs/rationale.md "Sessions in an object store") are served by package
// fleet, as every session is: a session's id is global, its state is its
// newest generation in the store, and this Server's live sessions are a
// cache of it. This file maps what the store protocol answers to HTTP.

// WritePolicy is when a Server writes a session to its store
// (fleet.WritePolicy, the same for every front door).
type WritePolicy = fleet.WritePolicy

const (
	// WriteRun writes after each run, before answering it: a run answered
	// 200 or 422 is in the store, and a crash loses no answered run. A run
	// whose write fails is answered with the error (409 conflict, 503
	// store_unavailable) and its effect on the session's state is undone.
	WriteRun = fleet.WriteRun
	// WriteAnswer writes after answering: a run's latency does not include
	// the write, and a crash (or a lost race) loses the runs answered since
	// the last write that landed.
	WriteAnswer = fleet.WriteAnswer
	// WriteHibernate writes only when the session hibernates (leaves the
	// replica's live Guests: with the Runner's SessionOptions.OnHibernate
	// set to Server.Hibernated) and when the Server closes (a drain). A
	// crash loses everything since; without sticky routing, another replica
	// serves the older state. For sessions that are scratch space, or one
	// replica that keeps its sessions across restarts.
	WriteHibernate = fleet.WriteHibernate
)

// ParseWritePolicy returns the policy named s.
func ParseWritePolicy(s string) (WritePolicy, error) { return fleet.ParseWritePolicy(s) }

// The error kinds of a session store.
const (
	// kindConflict (409): another replica wrote the session first; this run's
	// effect on the state is undone and the next request loads the newer one.
	kindConflict = "conflict"
	// kindStoreUnavailable (503): the store could not be read or written.
	kindStoreUnavailable = "store_unavailable"
	// kindOtherImage (503): the stored snapshot is of another Guest build;
	// a replica of that build can restore it (header Spine-Snapshot-Image).
	kindOtherImage = "other_image"
	// kindStoredSnapshot (500): the session's stored snapshot cannot be
	// restored by this server (damaged, or over its snapshot cap or its
	// sessions' memory): the server's fault, logged with the session's id.
	kindStoredSnapshot = "stored_snapshot"
)

// storeAnswer maps a store's error to a status, a kind and a message; ok is
// false for other errors.
func storeAnswer(err error) (status int, kind, msg string, ok bool) {
	var (
		conflict *fleet.ConflictError
		image    *fleet.ImageError
		store    *fleet.StoreError
		state    *fleet.NotStoredError
		stored   *fleet.StoredSnapshotError
	)
	switch {
	case errors.As(err, &stored):
		return http.StatusInternalServerError, kindStoredSnapshot, err.Error(), true
	case errors.As(err, &conflict), errors.Is(err, fleet.ErrTaken):
		return http.StatusConflict, kindConflict, err.Error(), true
	case errors.As(err, &image):
		return http.StatusServiceUnavailable, kindOtherImage, err.Error(), true
	case errors.As(err, &state) && errors.Is(err, spine.ErrSessionState):
		return http.StatusConflict, kindBadSnapshot, err.Error(), true
	case errors.As(err, &state) && (errors.Is(err, sessionstore.ErrTooLarge) || errors.Is(err, spine.ErrSnapshotTooLarge)),
		errors.As(err, &store) && errors.Is(err, sessionstore.ErrTooLarge):
		return http.StatusConflict, kindTooLarge, err.Error(), true
	case errors.As(err, &store), errors.As(err, &state):
		return http.StatusServiceUnavailable, kindStoreUnavailable, err.Error(), true
	}
	return 0, "", "", false
}

// storeHeaders sets the headers of a store's error answer: Retry-After
// for the passing ones, and the image a replica needs for the other build.
func storeHeaders(w http.ResponseWriter, err error) {
	var image *fleet.ImageError
	if errors.As(err, &image) {
		w.Header().Set("Spine-Snapshot-Image", image.Image)
	}
	if _, kind, _, ok := storeAnswer(err); ok && kind != kindConflict && kind != kindBadSnapshot && kind != kindTooLarge && kind != kindStoredSnapshot {
		w.Header().Set("Retry-After", "1")
	}
}

// StreamMemory is the most memory a Server takes, beyond the Guest's own,
// to write a session to its store or load one from it, whatever the
// session's size (fleet.StreamMemory). docs/sessions.md gives the figure
// measured for a 200 MB session.
const StreamMemory = fleet.StreamMemory

// HoldsSession reports whether the Server holds a session under id that
// its Runner has not closed (fleet.Fleet.Holds): what a sweep of its store
// (sessionstore.Expire) must leave.
func (s *Server) HoldsSession(id string) bool { return s.fleet.Holds(id) }

// Hibernated writes a session of the Server's that its Runner hibernated
// to the store, if the store lacks its state; it is the Runner's
// SessionOptions.OnHibernate (set it to this method), and what
// WriteHibernate writes on besides Close (fleet.Fleet.Hibernated).
func (s *Server) Hibernated(sess *spine.Session, snapshot io.Reader) {
	s.fleet.Hibernated(sess, snapshot)
}
