package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine/fleet"
)

// TestCutRunLeavesSessionAsItWas: a drain cuts a run in flight (its grace
// period ended) under every write policy, on both front doors: the run is
// refused (503 closed; a JSON-RPC error), and the session another replica
// then loads from the store is as it was before that run — not half of it.
func TestCutRunLeavesSessionAsItWas(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners per case")
	}
	for _, d := range doors {
		for _, write := range []fleet.WritePolicy{fleet.WriteRun, fleet.WriteAnswer, fleet.WriteHibernate} {
			t.Run(d.name+"/"+string(write), func(t *testing.T) {
				url, st := openStore(t)
				first := d.start(t, st, write, nil)
				id := first.open(t)
				if _, err := first.run(t, id, "n = 1"); err != nil {
					t.Fatal(err)
				}
				cut := make(chan error, 1)
				go func() {
					_, err := first.run(t, id, "n = 2\ngate(wait=False)\nwhile True: pass")
					cut <- err
				}()
				<-gate.Entered // the run changed n and loops
				first.cut()
				if err := <-cut; err == nil || !strings.Contains(err.Error(), "shut down") && !strings.Contains(err.Error(), "503") {
					t.Errorf("the cut run: %v", err)
				}
				if err := first.close(context.Background()); err != nil {
					t.Fatalf("close: %v", err)
				}

				next := d.start(t, open(t, url), write, nil)
				if got, err := next.run(t, id, "n"); err != nil || got != "1" {
					t.Errorf("n after the cut run, on the next replica: %s %v; want 1", got, err)
				}
				next.close(context.Background())
			})
		}
	}
}
