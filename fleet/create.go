package fleet

import (
	"context"
	"errors"
	"io"

	"github.com/spine-run/spine"
)

// Sessions made here: Create makes a new one, Restore one from a snapshot;
// both give it its first generation in the store before it is served.

// Create makes a new session for owner under a new id, and with a store
// writes its first generation (not under WriteHibernate, which writes it
// when it hibernates). The caller asked Admit first.
func (f *Fleet) Create(ctx context.Context, owner string) (string, error) {
	return f.start(ctx, owner, "", func(ctx context.Context) (*spine.Session, error) { return f.open(ctx, owner) })
}

// Restore makes a session for owner from the snapshot rd reads (at most
// Options.MaxSnapshot bytes: the caller bounds rd), under id, or under a
// new id when id is "". A session owner holds under id is replaced; an id
// another owner holds is ErrTaken. With a store the session is written
// before Restore returns, under every policy.
func (f *Fleet) Restore(ctx context.Context, owner, id string, rd io.Reader) (string, error) {
	if id != "" {
		if err := CheckID(id); err != nil {
			return "", err
		}
	}
	src := &errReader{r: rd}
	id, err := f.start(ctx, owner, id, func(ctx context.Context) (*spine.Session, error) { return f.restore(ctx, owner, src) })
	if err != nil && src.err != nil && !errors.Is(src.err, io.EOF) {
		return "", &SourceError{Err: src.err}
	}
	return id, err
}

// SourceError is Restore's error when its reader failed before the
// snapshot's end (a request body cut short or over its limit, say): the
// source's fault, told from a bad snapshot.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "reading the snapshot: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// start makes a session with open under id (a new one when ""), gives it
// its first generation, and adds it.
func (f *Fleet) start(ctx context.Context, owner, id string, open func(context.Context) (*spine.Session, error)) (string, error) {
	if f.Closed() {
		return "", spine.ErrClosed
	}
	replace := id != ""
	if !replace {
		id = newID()
	}
	sess, err := open(ctx)
	if err != nil {
		return "", err
	}
	e := f.newSession(id, owner, sess)
	if err := f.firstWrite(ctx, e, replace); err != nil {
		sess.Close(context.Background())
		return "", err
	}
	e.Unlock()
	if replace {
		f.replaceHeld(e)
	}
	if err := f.add(e); err != nil {
		sess.Close(context.Background())
		return "", err
	}
	return id, nil
}

// firstWrite gives a session made by Create or Restore its first
// generation in the store: 1 for a new id, or the one after the newest for
// a restore under an id the owner holds.
func (f *Fleet) firstWrite(ctx context.Context, e *Session, restore bool) error {
	if f.opts.Store == nil {
		return nil
	}
	if restore {
		gen, err := f.after(ctx, e.id, e.owner)
		if err != nil {
			return err
		}
		e.gen = gen
	}
	e.dirty = true
	if f.opts.Write == WriteHibernate && !restore {
		return nil
	}
	return f.put(ctx, e, f.live(ctx, e))
}
