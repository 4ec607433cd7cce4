package spine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestSessionFileLeftOpen: a session's run that leaves a file open in a
// variable, written to and not closed, ends with what it wrote in its files;
// the session cannot be snapshotted while the file is open, and closing it in
// the next run, as the refusal advises, works and lets the snapshot through.
func TestSessionFileLeftOpen(t *testing.T) {
	ctx := context.Background()
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{PoolSize: -1})
	for _, c := range []struct{ mode, write string }{
		{"w", "'written'"}, {"wb", "b'written'"}, {"a", "'written'"}, {"w+", "'written'"}, {"r+", "'written'"}, {"r", ""},
	} {
		t.Run(c.mode, func(t *testing.T) {
			s := spinetest.NewSession(t, r)
			src := "open('a.txt', 'w').close()\nf = open('a.txt', '" + c.mode + "')"
			want := ""
			if c.write != "" {
				src += "\nf.write(" + c.write + ")"
				want = "written"
			}
			out, err := s.Run(ctx, spine.Request{Source: src})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Files) != 1 || out.Files[0].Name != "a.txt" || string(out.Files[0].Data) != want {
				t.Fatalf("the run's files: %+v, want a.txt holding %q", out.Files, want)
			}
			if _, err := s.Snapshot(ctx); !errors.Is(err, spine.ErrSessionState) {
				t.Fatalf("snapshot with a file open: %v", err)
			}
			if got := spinetest.Step(t, s, "f.close()\nf.closed"); got != "true" {
				t.Fatalf("closed: %s", got)
			}
			if _, err := s.Snapshot(ctx); err != nil {
				t.Fatalf("snapshot after the close: %v", err)
			}
		})
	}
}
