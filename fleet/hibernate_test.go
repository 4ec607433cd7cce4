package fleet_test

import (
	"context"
	"testing"

	"github.com/spine-run/spine/fleet"
)

// TestHibernateWritesOnBothDoors: "hibernate" means one thing on both
// front doors: under the write policy hibernate, a session is written to
// the store when the Runner hibernates it (here to make room for another
// among one live session), and not before; another replica then serves it.
func TestHibernateWritesOnBothDoors(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners per case")
	}
	maxLive = 1
	t.Cleanup(func() { maxLive = 0 })
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			url, st := openStore(t)
			first := d.start(t, st, fleet.WriteHibernate, nil)
			a := first.open(t)
			if _, err := first.run(t, a, "a = 'kept'"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Head(t.Context(), a); err == nil {
				t.Fatalf("the store has session %s before it hibernated", a)
			}
			b := first.open(t)
			if _, err := first.run(t, b, "b = 1"); err != nil { // a hibernates to make room
				t.Fatal(err)
			}
			if _, err := st.Head(t.Context(), a); err != nil {
				t.Fatalf("the session the Runner hibernated is not in the store: %v", err)
			}
			next := d.start(t, open(t, url), fleet.WriteHibernate, nil)
			if got, err := next.run(t, a, "a"); err != nil || got != `"kept"` {
				t.Errorf("a on the next replica: %s %v", got, err)
			}
			next.close(context.Background())
			first.close(context.Background())
		})
	}
}
