package spine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestTenantShare: a tenant at its cap of live sessions makes room by
// hibernating its own, never another's; one at its cap of sessions is
// refused; one whose hibernated bytes are at their share keeps its session
// live and is refused the next, while another tenant goes on.
func TestTenantShare(t *testing.T) {
	ctx := context.Background()
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{MaxLive: 4, Idle: -1}})
	a := r.NewTenant("a", spine.TenantLimits{Sessions: 3, Live: 1, HibernatedMemory: 512 << 10})
	b := r.NewTenant("b", spine.TenantLimits{Live: 2})
	open := func(ten *spine.Tenant) (*spine.Session, error) {
		s, err := ten.NewSession(ctx)
		if err == nil {
			t.Cleanup(func() { s.Close(ctx) })
		}
		return s, err
	}
	b1, err := open(b)
	if err != nil {
		t.Fatal(err)
	}
	spinetest.Step(t, b1, "x = 'b1'")
	a1, err := open(a)
	if err != nil {
		t.Fatal(err)
	}
	spinetest.Step(t, a1, "x = 'a1'")
	a2, err := open(a) // a's one live place: a1 hibernates, b1 stays live
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Live != 1 || st.Sessions != 2 || st.HibernatedMemory == 0 {
		t.Fatalf("a: %+v", st)
	}
	if st := b.Stats(); st.Live != 1 {
		t.Fatalf("b: %+v", st)
	}
	// a2 fills a's hibernated share with bytes that do not compress: it
	// cannot hibernate, so a1 cannot wake, and a may make nothing more live.
	spinetest.Step(t, a2, "import os\nkeep = os.urandom(1 << 20)")
	if _, err := a1.Run(ctx, spine.Request{Source: "x"}); !errors.Is(err, spine.ErrTooManySessions) || !strings.Contains(err.Error(), `tenant "a"`) {
		t.Fatalf("a1 waking past a's share: %v", err)
	}
	if _, err := open(a); !errors.Is(err, spine.ErrTooManySessions) {
		t.Fatalf("a's third session: %v", err)
	}
	if _, err := open(a); !errors.Is(err, spine.ErrTooManySessions) || !strings.Contains(err.Error(), "holds 2") && !strings.Contains(err.Error(), "live") {
		t.Fatalf("a past its sessions: %v", err)
	}
	// b is untouched: its second live session and b1 run.
	b2, err := open(b)
	if err != nil {
		t.Fatal(err)
	}
	if spinetest.Step(t, b2, "1") != "1" || spinetest.Step(t, b1, "x") != `"b1"` {
		t.Fatal("b's sessions")
	}
	// Room made within a's own share lets a1 wake.
	a2.Close(ctx)
	if got := spinetest.Step(t, a1, "x"); got != `"a1"` {
		t.Fatal(got)
	}
	if st := a.Stats(); st.Sessions != 1 || st.Live != 1 || st.HibernatedMemory != 0 {
		t.Fatalf("a at the end: %+v", st)
	}
}

// TestSessionDirBytes: a snapshot that would take the session folder past
// SessionOptions.DirBytes is not written; the session stays live and whole.
func TestSessionDirBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Dir: dir, DirBytes: 1<<20 + 64<<10, Idle: -1}})
	small := spinetest.NewSession(t, r)
	spinetest.Step(t, small, "import os\nkeep = os.urandom(96 << 10)") // with big's, over DirBytes
	if err := small.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	big := spinetest.NewSession(t, r)
	spinetest.Step(t, big, "import os\nkeep = os.urandom(1 << 20)") // alone, within DirBytes
	if err := big.Hibernate(ctx); !errors.Is(err, spine.ErrTooManySessions) || !strings.Contains(err.Error(), "session folder") {
		t.Fatalf("hibernating past DirBytes: %v", err)
	}
	if files := hibernatedFiles(t, dir); len(files) != 1 {
		t.Fatalf("files in the folder: %v", files)
	}
	if got := spinetest.Step(t, big, "len(keep)"); got != "1048576" {
		t.Fatal(got)
	}
	small.Close(ctx)
	if err := big.Hibernate(ctx); err != nil {
		t.Fatalf("hibernating once there is room: %v", err)
	}
	if got := spinetest.Step(t, big, "len(keep)"); got != "1048576" {
		t.Fatal(got)
	}
	if files := hibernatedFiles(t, dir); len(files) != 0 {
		t.Fatalf("left behind: %v", files)
	}
}
