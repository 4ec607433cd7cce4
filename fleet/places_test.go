package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/sessionstore"
)

// attached runs source in the session Attach gives for id and client, as
// a front door's call does, and returns the run's value and error (or
// Attach's or Lock's), and what Session.Lost said after it.
func attached(t *testing.T, f *fleet.Fleet, id, client, source string) (value string, err, lost error) {
	e, err := f.Attach(id, "", client)
	if err != nil {
		return "", err, nil
	}
	defer f.Release(e)
	if err := e.Lock(t.Context()); err != nil {
		return "", err, nil
	}
	defer e.Unlock()
	out, err := f.Run(t.Context(), e, spine.Request{Source: source})
	if out != nil {
		value = string(out.Value)
	}
	return value, err, e.Lost()
}

// placesFleet is a Fleet without a store whose places are places, and
// each client's perClient (nil: no cap of its own).
func placesFleet(t *testing.T, places int, perClient func(string) int) *fleet.Fleet {
	f := fleet.New(spinetest.NewRunner(t, manifest, nil), &fleet.Options{Places: places, PlacesOf: perClient})
	t.Cleanup(func() { f.Close(context.Background()) })
	return f
}

// TestPlacesLeastRecentlyUsed: past Options.Places, the session used least
// recently gives up its place; without a store its state is lost, and its
// next Run, in a new session, is told why (Lost).
func TestPlacesLeastRecentlyUsed(t *testing.T) {
	f := placesFleet(t, 2, nil)
	for _, id := range []string{"a", "b", "c"} {
		if _, err, lost := attached(t, f, id, "", id+" = 1"); err != nil || lost != nil {
			t.Fatalf("%s: %v, lost %v", id, err, lost)
		}
	}
	// c took a's place; a takes b's, used before c.
	value, err, lost := attached(t, f, "a", "", "'a' in globals()")
	var evicted *fleet.EvictedError
	if err != nil || value != "false" || !errors.As(lost, &evicted) || evicted.Limit != 2 || evicted.Own || evicted.Err != nil {
		t.Fatalf("a after c: %s, %v, lost %v; want its state lost to make room", value, err, lost)
	}
	if value, err, lost := attached(t, f, "c", "", "c"); err != nil || value != "1" || lost != nil {
		t.Errorf("c: %s, %v, lost %v; want its state", value, err, lost)
	}
	if _, _, lost := attached(t, f, "b", "", "1"); !errors.As(lost, &evicted) {
		t.Errorf("b: lost %v; want its state lost to make room", lost)
	}
	if _, _, lost := attached(t, f, "b", "", "1"); lost != nil {
		t.Errorf("b again: lost %v; Lost says it once", lost)
	}
}

// TestPlacesRunningKept: a session that is running keeps its place: a
// session that finds every place running is refused (*FullError).
func TestPlacesRunningKept(t *testing.T) {
	f := placesFleet(t, 1, nil)
	done := make(chan error, 1)
	go func() {
		_, err, _ := attached(t, f, "a", "", "gate()")
		done <- err
	}()
	<-gate.Entered
	_, err, _ := attached(t, f, "b", "", "1")
	var full *fleet.FullError
	if !errors.As(err, &full) || full.Limit != 1 || full.Own || !errors.Is(err, spine.ErrTooManySessions) {
		t.Errorf("b while a runs: %v; want a *FullError", err)
	}
	gate.Let()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err, _ := attached(t, f, "b", "", "1"); err != nil {
		t.Errorf("b once a has run: %v", err)
	}
}

// TestPlacesClients: a place is taken from the client holding the most
// (not the session used least recently, another client's), and a client
// past its own cap (PlacesOf) gives up its own session, places free or not.
func TestPlacesClients(t *testing.T) {
	f := placesFleet(t, 3, func(client string) int {
		if client == "capped" {
			return 1
		}
		return 0
	})
	attached(t, f, "q1", "q", "x = 'q'")
	attached(t, f, "p1", "p", "x = 'p'")
	attached(t, f, "p2", "p", "x = 'p'")
	if _, _, lost := attached(t, f, "p3", "p", "1"); lost != nil {
		t.Fatal(lost)
	}
	if value, _, lost := attached(t, f, "q1", "q", "x"); value != `"q"` || lost != nil {
		t.Errorf("q's session after p's third: %s, lost %v; want its state", value, lost)
	}

	attached(t, f, "c1", "capped", "x = 1")
	if value, _, lost := attached(t, f, "c2", "capped", "x = 2\nx"); value != "2" || lost != nil {
		t.Fatalf("capped's second: %s, lost %v", value, lost)
	}
	_, _, lost := attached(t, f, "c1", "capped", "1")
	var evicted *fleet.EvictedError
	if !errors.As(lost, &evicted) || !evicted.Own || evicted.Limit != 1 {
		t.Errorf("capped's first after its second: lost %v; want it put aside for its own client's", lost)
	}
}

// TestPlacesStore: with a store, the session that gives up its place is
// written first, so its next Run loads its state and nothing is lost.
func TestPlacesStore(t *testing.T) {
	st, err := sessionstore.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := fleet.New(spinetest.NewRunner(t, manifest, nil), &fleet.Options{Store: st, Write: fleet.WriteHibernate, Places: 1})
	defer f.Close(context.Background())
	attached(t, f, "a", "", "x = 'a'")
	attached(t, f, "b", "", "x = 'b'") // a is written, then closed
	if f.Len() != 1 {
		t.Errorf("%d sessions held; want b alone (a put aside is the store's)", f.Len())
	}
	if value, err, lost := attached(t, f, "a", "", "x"); err != nil || value != `"a"` || lost != nil {
		t.Errorf("a after b: %s, %v, lost %v; want its state from the store", value, err, lost)
	}
}
