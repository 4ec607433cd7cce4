// Package fleet serves Spine sessions by id: the one place beneath Spine's
// front doors (the HTTP API, package service; the MCP server, package
// mcpserver) that keeps the table of sessions by id, one lock per session,
// who owns each session and that owner's share, and the protocol of a
// session store (docs/scaling.md): loading a session another replica
// wrote, its generations, a write that loses a race (a conflict), when a
// session is written (the write policy), and writing every session the
// store lacks when the process stops (a drain). A front door only
// translates its protocol to these calls; an embedder can serve sessions
// over another transport the same way.
//
// A Fleet holds sessions made through it on one spine.Runner. Each has an
// id (32 hex digits when the Fleet makes it; letters, digits, '-' and '_'
// when the caller names it) and an owner (sessionstore.Owner of a token;
// "" without tokens): a caller naming an id with another owner finds no
// session (ErrNoSession), as for an id never made.
//
// An operation on a session takes it with Get, Load or Attach (which mark
// it in use until Release), then its lock (Session.Lock, one operation at a
// time), then calls Run, Snapshot, Fresh or PutAside, then unlocks and
// releases it. A front door that gives its clients an id before their
// first call (MCP) attaches to it (Attach), and may cap the attached
// sessions that are live at once (Options.Places): past it the least
// recently used is put aside, and Session.Lost tells a session whose state
// was lost so. Without a store a session lives and ends in this process.
// With Options.Store its id is global: Load reads a session another replica
// wrote, each Run first loads a newer generation if another replica wrote
// one, and writes the next generation when Options.Write says.
//
// One meaning of each word:
//
//   - A session is written when it becomes a generation in the store.
//   - It hibernates when it leaves this process's live Guests: the Runner
//     hibernated it (Fleet.Hibernated), or the front door put it aside
//     (PutAside). WriteHibernate writes it then, and at Close.
//   - A run is cut when the Fleet's Cut stops it (a drain past its grace):
//     the session is left as it was before that run, under every policy:
//     what the store holds, or, when the store lacked the session's state
//     (WriteHibernate, or a write after answering that failed), the
//     snapshot the Fleet kept of it in a file as the run began, which is
//     written.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/sessionstore"
)

// WritePolicy is when a session is written to the store.
type WritePolicy string

const (
	// WriteRun writes after each run, before its answer: an answered run
	// is in the store, and a crash loses none. A run whose write fails is
	// answered with the error and its effect on the session is undone.
	WriteRun WritePolicy = "run"
	// WriteAnswer writes after the answer: a run's latency does not
	// include the write (the session's next operation waits for it), and a
	// crash or a lost race loses the runs answered since the last write
	// that landed.
	WriteAnswer WritePolicy = "answer"
	// WriteHibernate writes when the session hibernates (leaves the live
	// Guests: the Runner hibernates it, or the front door puts it aside)
	// and at Close. A crash loses everything since; replicas must be
	// sticky by session id, as another serves the last written state.
	WriteHibernate WritePolicy = "hibernate"
)

// ParseWritePolicy returns the policy named s.
func ParseWritePolicy(s string) (WritePolicy, error) {
	switch p := WritePolicy(s); p {
	case WriteRun, WriteAnswer, WriteHibernate:
		return p, nil
	}
	return "", fmt.Errorf("session write policy %q: it is run, answer or hibernate", s)
}

// A Share is what one owner may take of the Fleet.
type Share struct {
	// Name names the owner in errors and logs (a token's name, never the
	// token).
	Name string
	// Tenant is the share of the Runner the owner's sessions count in; nil:
	// the Runner's own.
	Tenant *spine.Tenant
	// Sessions caps the sessions the owner holds in the Fleet at once; 0:
	// no cap of its own.
	Sessions int
	// StoreBytes caps the bytes the owner's sessions keep in the store,
	// across every replica (sessionstore.Store.PutOwned); 0: no cap.
	StoreBytes int64
}

// Options are a Fleet's settings. The zero value, and a nil *Options, mean
// the defaults.
type Options struct {
	// Store, when set, keeps the sessions beyond this process: their ids
	// are global, and every replica on the store serves them. It stays the
	// caller's to close.
	Store sessionstore.Store

	// Write is when a session is written to Store. Default WriteRun.
	Write WritePolicy

	// MaxSnapshot caps a snapshot written to or loaded from Store, and a
	// restore. Default: the Runner's SessionOptions.MaxSnapshot, the
	// largest snapshot its sessions can make.
	MaxSnapshot int64

	// StoreTimeout bounds a store operation that outlives its request (the
	// write of a run that happened). Default 30 s.
	StoreTimeout time.Duration

	// ShareOf returns an owner's share; nil: every owner has the whole
	// Fleet.
	ShareOf func(owner string) Share

	// Places caps the sessions Attach serves that have a live
	// spine.Session at once; 0: no cap. Past it, a session that needs one
	// takes the place of the one used least recently that no operation
	// holds, of the client holding the most, which is put aside (PutAside):
	// written to the store, or without a store closed, its state lost,
	// which its next operation is told (Session.Lost). See places.go.
	Places int

	// PlacesOf, when set, returns the cap of one client's places (Attach
	// names the client; "" for a session that is a client of its own): past
	// it, the client's own session used least recently is put aside for
	// its new one. 0: no cap of its own.
	PlacesOf func(client string) int

	// Logger receives the writes that failed with nobody to answer, and a
	// warning for the sessions Close drops. nil: no logging.
	Logger *slog.Logger

	// OnStore, when set, is told each store operation that succeeded by
	// name: "load", "refresh", "write", and "conflict" for a write that
	// lost (for metrics).
	OnStore func(op string)

	// OnWait, when set, is told when an operation starts waiting for a
	// session's lock (true) and stops (false) (for metrics).
	OnWait func(waiting bool)
}

// DefaultStoreTimeout is the default of Options.StoreTimeout.
const DefaultStoreTimeout = 30 * time.Second

// A Fleet serves the sessions made through it on one Runner by id. It is
// safe for concurrent use.
type Fleet struct {
	runner *spine.Runner
	opts   Options

	mu       sync.Mutex
	byID     map[string]*Session
	bySpine  map[*spine.Session]*Session // the same sessions, by their live spine.Session
	perOwner map[string]int              // sessions in byID by owner
	closed   bool                        // Close was called
	placed   int                         // sessions holding a place (Options.Places)
	byClient map[string]int              // of those, by their client (Session.clientKey)
	uses     uint64                      // Attach's calls so far: when a session was used last

	cut   context.Context // done once Cut is called
	doCut context.CancelFunc
}

// New returns a Fleet of runner's sessions; runner stays the caller's:
// close it after the Fleet. opts may be nil.
func New(runner *spine.Runner, opts *Options) *Fleet {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Write == "" {
		o.Write = WriteRun
	}
	if o.MaxSnapshot <= 0 {
		o.MaxSnapshot = int64(runner.Options().Sessions.MaxSnapshot)
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = DefaultStoreTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnStore == nil {
		o.OnStore = func(string) {}
	}
	if o.OnWait == nil {
		o.OnWait = func(bool) {}
	}
	f := &Fleet{
		runner:   runner,
		opts:     o,
		byID:     map[string]*Session{},
		bySpine:  map[*spine.Session]*Session{},
		perOwner: map[string]int{},
		byClient: map[string]int{},
	}
	f.cut, f.doCut = context.WithCancel(context.Background())
	return f
}

// Options returns the Fleet's settings, defaults filled in.
func (f *Fleet) Options() Options { return f.opts }

// Runner returns the Runner the Fleet's sessions run on.
func (f *Fleet) Runner() *spine.Runner { return f.runner }

// Errors of a Fleet's operations. The front doors map them to their
// protocol's answers.
var (
	// ErrNoSession is an id the Fleet does not hold, nor the store, for
	// the caller's owner: never made, deleted or expired, or another
	// owner's.
	ErrNoSession = errors.New("no such session: it was never made, was deleted or expired, or another token made it")

	// ErrTaken is a session made under an id another owner holds.
	ErrTaken = errors.New("that session id is taken")

	// ErrCut is the error of a run Cut stopped: the session is left as it
	// was before the run. It is spine.ErrClosed too (errors.Is).
	ErrCut = fmt.Errorf("%w: the server shut down before the run ended (its grace period ran out); the run was stopped and its effect on the session undone", spine.ErrClosed)
)

// TooManyError is a session refused past its owner's Share.Sessions.
type TooManyError struct{ Limit int }

func (e *TooManyError) Error() string {
	return fmt.Sprintf("%v: this token holds %d sessions, its limit; delete one first", spine.ErrTooManySessions, e.Limit)
}

// Is makes a TooManyError spine.ErrTooManySessions.
func (e *TooManyError) Is(target error) bool { return target == spine.ErrTooManySessions }

// TurnError is an operation that stopped waiting for its session's lock:
// the operation before it did not end in time.
type TurnError struct{ Err error }

func (e *TurnError) Error() string {
	return "the session's previous run or snapshot did not end in time: " + e.Err.Error()
}
func (e *TurnError) Unwrap() error { return e.Err }

// newID returns a new session id: 128 random bits as 32 hex digits.
func newID() string {
	id := make([]byte, 16)
	rand.Read(id) // never fails (crypto/rand)
	return hex.EncodeToString(id)
}

// CheckID reports whether id can name a session (sessionstore.CheckID).
func CheckID(id string) error { return sessionstore.CheckID(id) }

// share is owner's Share.
func (f *Fleet) share(owner string) Share {
	if f.opts.ShareOf == nil {
		return Share{}
	}
	return f.opts.ShareOf(owner)
}

// Admit reports whether owner may make a session now: ErrClosed once the
// Fleet is closed, a *TooManyError when the owner holds its share. A front
// door asks before it spends anything on a new session.
func (f *Fleet) Admit(owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return spine.ErrClosed
	}
	if n := f.share(owner).Sessions; n > 0 && f.perOwner[owner] >= n {
		return &TooManyError{n}
	}
	return nil
}

// Len returns how many sessions the Fleet holds.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byID)
}

// Closed reports whether Close was called.
func (f *Fleet) Closed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Cut stops every run in flight in the Fleet's sessions, and every later
// one: each ends with ErrCut, its session left as it was before the run
// (docs/scaling.md, "Rollouts and drains"). A front door calls it when a
// drain's grace period ends, then Close.
func (f *Fleet) Cut() { f.doCut() }

// isCut reports whether Cut was called.
func (f *Fleet) isCut() bool { return f.cut.Err() != nil }
