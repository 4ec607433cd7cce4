package spine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestSnapshotDamage flips bits all over a snapshot and cuts it everywhere:
// every variant is refused with ErrSnapshot, and the Runner is fine after.
func TestSnapshotDamage(t *testing.T) {
	ctx := context.Background()
	r := shared(t)
	s := spinetest.NewSession(t, r)
	spinetest.Step(t, s, "x = 1")
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stride := max(1, len(blob)/500)
	for i := 0; i < len(blob); i += stride {
		bad := append([]byte(nil), blob...)
		bad[i] ^= 0x40
		if _, err := r.Restore(ctx, bad); !errors.Is(err, spine.ErrSnapshot) && !errors.Is(err, spine.ErrSnapshotMismatch) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if _, err := r.Restore(ctx, blob[:i]); !errors.Is(err, spine.ErrSnapshot) {
			t.Fatalf("cut at %d: %v", i, err)
		}
	}
	for _, junk := range [][]byte{nil, []byte("{}"), make([]byte, 1<<20)} {
		if _, err := r.Restore(ctx, junk); !errors.Is(err, spine.ErrSnapshot) {
			t.Fatalf("junk: %v", err)
		}
	}
	if got := spinetest.Step(t, s, "x + 1"); got != "2" {
		t.Fatalf("after the damage: %s", got)
	}
}
