package service_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// gatedStore is a real store whose next Put, once armed, stops before it
// begins until the test lets it go on.
type gatedStore struct {
	sessionstore.Store
	armed            atomic.Bool
	reached, release chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, id string, meta sessionstore.Meta, max int64, write func(io.Writer) error) error {
	if g.armed.CompareAndSwap(true, false) {
		g.reached <- struct{}{}
		<-g.release
	}
	return g.Store.Put(ctx, id, meta, max, write)
}

// TestStoreWriteAnswerHibernate: under WriteAnswer, a session whose write
// after answering has not begun is hibernated by its Runner (to make room
// for another live session); the hibernation does not wait for that write
// (which streams from the session, and so waits for the hibernation), and
// the write, once let go, stores the run's state from the hibernated
// snapshot, which another replica then serves.
func TestStoreWriteAnswerHibernate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Runners")
	}
	st := &gatedStore{Store: memStore(t), reached: make(chan struct{}), release: make(chan struct{})}
	var first *service.Server
	r := spinetest.NewRunner(t, nil, &spine.Options{Sessions: spine.SessionOptions{
		MaxLive:     1,
		OnHibernate: func(s *spine.Session, snapshot io.Reader) { first.Hibernated(s, snapshot) },
	}})
	first, ts := newSessionServer(t, r, &service.Options{SessionStore: st, SessionWrite: service.WriteAnswer})
	a := client{t: t, url: ts.URL}
	id := a.create()
	st.armed.Store(true)
	a.mustRun(id, "x = 'answered'")
	<-st.reached // the write after answering waits at the gate
	other := a.create()
	close(st.release)
	if got := a.mustRun(other, "1"); got != "1" {
		t.Fatal(got)
	}
	// A snapshot of the session waits for its write, and writes nothing.
	a.snapshot(id)
	b := replicas(t, 1, nil, st.Store, service.WriteRun)[0]
	if got := b.mustRun(id, "x"); got != `"answered"` {
		t.Fatalf("on another replica: %s", got)
	}
}
