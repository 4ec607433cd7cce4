package storetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine/sessionstore"
)

// putOwned writes n bytes as generation gen of id, for owner, whose
// sessions may keep limit bytes.
func putOwned(ctx context.Context, st sessionstore.Store, id, owner string, gen uint64, n int, limit int64) error {
	meta := sessionstore.Meta{Generation: gen, Owner: owner, Image: "img"}
	return st.PutOwned(ctx, id, meta, 1<<20, limit, func(w io.Writer) error {
		_, err := w.Write(bytes.Repeat([]byte{'x'}, n))
		return err
	})
}

// OwnerLimit has one owner fill its limit: its next snapshot is
// refused (OwnerFullError, ErrTooLarge) and not kept, while another owner's
// sessions still store and load; rewriting a session counts it once, and a
// deleted session's bytes are free again.
func OwnerLimit(t *testing.T, set Set) {
	ctx := context.Background()
	alice, bob := sessionstore.Owner("alice-token-0123456789"), sessionstore.Owner("bob-token-0123456789")
	const limit = 100
	for name, st := range set.Stores {
		t.Run(name, func(t *testing.T) {
			check := func(owner string, sessions int, total int64) {
				t.Helper()
				n, b, err := st.OwnerBytes(ctx, owner)
				if err != nil || n != sessions || b != total {
					t.Fatalf("OwnerBytes = %d sessions, %d bytes, %v; want %d, %d", n, b, err, sessions, total)
				}
			}
			if err := putOwned(ctx, st, "a1", alice, 1, 60, limit); err != nil {
				t.Fatal(err)
			}
			err := putOwned(ctx, st, "a2", alice, 1, 50, limit)
			var full *sessionstore.OwnerFullError
			if !errors.Is(err, sessionstore.ErrTooLarge) || !errors.As(err, &full) || full.Limit != limit || full.Others != 60 {
				t.Fatalf("a snapshot over the owner's limit: %v, want an OwnerFullError of 100 and 60", err)
			}
			if _, err := st.Head(ctx, "a2"); !errors.Is(err, sessionstore.ErrNotFound) {
				t.Fatalf("the refused snapshot was kept: Head = %v", err)
			}
			check(alice, 1, 60)
			// The other owner's sessions are not held back.
			if err := putOwned(ctx, st, "b1", bob, 1, 90, limit); err != nil {
				t.Fatalf("the other owner's write: %v", err)
			}
			if data, meta, err := GetBytes(ctx, st, "b1", 1<<20); err != nil || len(data) != 90 || !meta.OwnedBy(bob) {
				t.Fatalf("the other owner's session: %d bytes, %+v, %v", len(data), meta, err)
			}
			if err := putOwned(ctx, st, "a2", alice, 1, 40, limit); err != nil {
				t.Fatalf("a snapshot that fits: %v", err)
			}
			check(alice, 2, 100)
			// A session's next generation replaces its own bytes.
			if err := putOwned(ctx, st, "a1", alice, 2, 61, limit); !errors.Is(err, sessionstore.ErrTooLarge) {
				t.Fatalf("a1 grown past the limit: %v", err)
			}
			if err := putOwned(ctx, st, "a1", alice, 2, 55, limit); err != nil {
				t.Fatalf("a1 rewritten within the limit: %v", err)
			}
			check(alice, 2, 95)
			if name == "file" {
				// One entry per session: the older generation's went.
				if n := countFiles(t, filepath.Join(set.FileDir, "owners", alice)); n != 2 {
					t.Fatalf("alice's index holds %d entries, want 2", n)
				}
			}
			// A deleted session leaves the index, and its bytes are free.
			if err := st.Delete(ctx, "a1"); err != nil {
				t.Fatal(err)
			}
			check(alice, 1, 40)
			if err := putOwned(ctx, st, "a3", alice, 1, 60, limit); err != nil {
				t.Fatalf("after a delete: %v", err)
			}
			check(alice, 2, 100)
			check(bob, 1, 90)
			if name == "file" {
				if n := countFiles(t, filepath.Join(set.FileDir, "owners", alice)); n != 2 {
					t.Fatalf("after a delete alice's index holds %d entries, want 2", n)
				}
			}
			// A write without a limit is Put: no index.
			if err := PutBytes(ctx, st, "c1", []byte("free"), sessionstore.Meta{Generation: 1, Owner: bob}); err != nil {
				t.Fatal(err)
			}
			check(bob, 1, 90)
		})
	}
}

// OwnerLimitRace has several writes of one owner, on other
// sessions, run at once: each can take what the others have not recorded
// yet, so the owner's total stays within its limit plus one snapshot per
// write beside the first (docs/scaling.md).
func OwnerLimitRace(t *testing.T, stores map[string]sessionstore.Store) {
	ctx := context.Background()
	owner := sessionstore.Owner("racing-token-0123456789")
	const limit, size, writers = 100, 60, 4
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for w := range writers {
				wg.Go(func() {
					<-start
					errs[w] = putOwned(ctx, st, "r"+strings.Repeat("x", w+1), owner, 1, size, limit)
				})
			}
			close(start)
			wg.Wait()
			stored := 0
			for w, err := range errs {
				switch {
				case err == nil:
					stored++
				case !errors.Is(err, sessionstore.ErrTooLarge):
					t.Fatalf("writer %d: %v", w, err)
				}
			}
			n, total, err := st.OwnerBytes(ctx, owner)
			if err != nil || n != stored || total != int64(stored*size) {
				t.Fatalf("OwnerBytes = %d, %d, %v; %d writes stored", n, total, err, stored)
			}
			if stored < 1 || total > limit+(writers-1)*size {
				t.Fatalf("%d of %d writes stored, %d bytes: the bound is %d", stored, writers, total, limit+(writers-1)*size)
			}
			// Once they are recorded, the next write sees them all.
			if err := putOwned(ctx, st, "after", owner, 1, 1, int64(total)); !errors.Is(err, sessionstore.ErrTooLarge) {
				t.Fatalf("a write past the recorded total: %v", err)
			}
		})
	}
}

// countFiles counts the files under dir (0 when it does not exist).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, ".attrs") {
			n++
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}
