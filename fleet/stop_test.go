package fleet_test

import (
	"context"
	"strings"
	"testing"
)

// TestStopWithoutStoreSaysWhatIsLost: a replica with neither store nor
// session directory that stops drops its live sessions, and says how many
// at WARN, on both front doors.
func TestStopWithoutStoreSaysWhatIsLost(t *testing.T) {
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			log, lines := logs()
			r := d.start(t, nil, "", log)
			for range 2 {
				id := r.open(t)
				if _, err := r.run(t, id, "x = 1"); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := lines.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "sessions=2") {
				t.Errorf("the log at stop: %q; want a WARN line with sessions=2", got)
			}
		})
	}
}
