package sessionstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/sessionstore"
)

// storeSet is every kind of store a test can reach: gocloud's real memblob
// and fileblob drivers and, when SPINE_FLEET_VERSITYGW names its binary, a
// real S3-compatible server.
type storeSet struct {
	stores  map[string]sessionstore.Store // by kind: mem, file, s3
	urls    map[string]string             // by kind
	fileDir string                        // the file:// store's directory
}

func openStores(t *testing.T) storeSet {
	t.Helper()
	set := storeSet{stores: map[string]sessionstore.Store{}, urls: spinetest.StoreURLs(t)}
	set.urls["mem"] = "mem://"
	set.fileDir = strings.TrimPrefix(set.urls["file"], "file://")
	for name, url := range set.urls {
		st, err := sessionstore.Open(context.Background(), url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		t.Cleanup(func() { st.Close() })
		set.stores[name] = st
	}
	return set
}

// stores is openStores' stores.
func stores(t *testing.T) map[string]sessionstore.Store {
	t.Helper()
	return openStores(t).stores
}

func TestStoreGenerations(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			const id = "0123456789abcdef0123456789abcdef"
			if _, _, err := getBytes(ctx, st, id, 1<<20); !errors.Is(err, sessionstore.ErrNotFound) {
				t.Fatalf("Get of a new id: %v, want ErrNotFound", err)
			}
			m1 := sessionstore.Meta{Generation: 1, Owner: "aa", Image: "bb"}
			if err := putBytes(ctx, st, id, []byte("one"), m1); err != nil {
				t.Fatal(err)
			}
			if err := putBytes(ctx, st, id, []byte("other"), m1); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("second write of generation 1: %v, want ErrConflict", err)
			}
			if err := putBytes(ctx, st, id, []byte("two"), sessionstore.Meta{Generation: 2, Owner: "aa", Image: "bb"}); err != nil {
				t.Fatal(err)
			}
			blob, meta, err := getBytes(ctx, st, id, 1<<20)
			if err != nil || string(blob) != "two" || meta != (sessionstore.Meta{Generation: 2, Owner: "aa", Image: "bb"}) {
				t.Fatalf("Get = %q, %+v, %v", blob, meta, err)
			}
			if _, _, err := getBytes(ctx, st, id, 2); !errors.Is(err, sessionstore.ErrTooLarge) {
				t.Fatalf("Get over the cap: %v", err)
			}
			// A writer that held generation 1 writes 2 (taken) or, once 2 is
			// swept, 2 again beside 3: both are conflicts, and 3 stays.
			if err := putBytes(ctx, st, id, []byte("three"), sessionstore.Meta{Generation: 3}); err != nil {
				t.Fatal(err)
			}
			if err := putBytes(ctx, st, id, []byte("stale"), sessionstore.Meta{Generation: 2}); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("stale write of a swept generation: %v, want ErrConflict", err)
			}
			if blob, _, _ := getBytes(ctx, st, id, 1<<20); string(blob) != "three" {
				t.Fatalf("after a stale write the store holds %q", blob)
			}
			if newer, err := st.Newer(ctx, id, 2); err != nil || !newer {
				t.Fatalf("Newer(2) = %v, %v", newer, err)
			}
			if newer, err := st.Newer(ctx, id, 3); err != nil || newer {
				t.Fatalf("Newer(3) = %v, %v", newer, err)
			}
			if err := st.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, _, err := getBytes(ctx, st, id, 1<<20); !errors.Is(err, sessionstore.ErrNotFound) {
				t.Fatalf("Get after Delete: %v", err)
			}
			// The replica that held generation 3 cannot bring it back.
			if err := putBytes(ctx, st, id, []byte("zombie"), sessionstore.Meta{Generation: 4}); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("write after Delete: %v, want ErrConflict", err)
			}
			if meta, err := st.Head(ctx, id); err != nil || !meta.Deleted {
				t.Fatalf("Head after Delete = %+v, %v", meta, err)
			}
		})
	}
}

// TestStoreRace has many writers holding one generation write the next at
// once: exactly one wins, the others get ErrConflict, and the store holds
// the winner's bytes.
func TestStoreRace(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			const id = "race"
			if err := putBytes(ctx, st, id, []byte("base"), sessionstore.Meta{Generation: 1}); err != nil {
				t.Fatal(err)
			}
			for gen := uint64(2); gen < 12; gen++ {
				const writers = 8
				var wg sync.WaitGroup
				errs := make([]error, writers)
				start := make(chan struct{})
				for w := range writers {
					wg.Go(func() {
						<-start
						errs[w] = putBytes(ctx, st, id, fmt.Appendf(nil, "gen %d by %d", gen, w), sessionstore.Meta{Generation: gen})
					})
				}
				close(start)
				wg.Wait()
				winner := onlyWinner(t, fmt.Sprintf("generation %d", gen), errs)
				blob, meta, err := getBytes(ctx, st, id, 1<<20)
				if err != nil || meta.Generation != gen || !bytes.Equal(blob, fmt.Appendf(nil, "gen %d by %d", gen, winner)) {
					t.Fatalf("generation %d: store holds %q (generation %d, %v), winner %d", gen, blob, meta.Generation, err, winner)
				}
			}
		})
	}
}

// onlyWinner returns the one writer of errs whose write succeeded, and fails
// t (naming what was raced for) unless every other one's is a conflict.
func onlyWinner(t *testing.T, what string, errs []error) int {
	t.Helper()
	winner := -1
	for w, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: writers %d and %d both won", what, winner, w)
		case err == nil:
			winner = w
		case !errors.Is(err, sessionstore.ErrConflict):
			t.Fatalf("%s: writer %d: %v", what, w, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no writer won", what)
	}
	return winner
}

func TestStoreIDs(t *testing.T) {
	ctx := context.Background()
	st, err := sessionstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"", "../x", "a/b", "a.b", "a b", "a\x00", "é", strings.Repeat("a", 65), "a\n"} {
		if err := putBytes(ctx, st, id, nil, sessionstore.Meta{Generation: 1}); !errors.Is(err, sessionstore.ErrBadID) {
			t.Errorf("Put(%q): %v, want ErrBadID", id, err)
		}
		if _, _, err := getBytes(ctx, st, id, 1); !errors.Is(err, sessionstore.ErrBadID) {
			t.Errorf("Get(%q): %v, want ErrBadID", id, err)
		}
	}
	for _, id := range []string{"a", strings.Repeat("Z", 64), "a-b_c9"} {
		if err := sessionstore.CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
	if _, err := sessionstore.Open(ctx, "http://example.invalid/"); err == nil {
		t.Error("Open of an http URL succeeded")
	}
}
