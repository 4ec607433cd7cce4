// Package storetest is the Store's own suite: what every sessionstore.Store
// must do, whatever holds its objects. sessionstore's tests run it over
// file:// and mem://, cloudstore's over a real S3-compatible server.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine/sessionstore"
)

// Set is the stores a suite runs on.
type Set struct {
	Stores  map[string]sessionstore.Store // by kind: mem, file, s3
	FileDir string                        // the file:// store's directory, if any ("file")
	// Failed, when not nil, is called by PutKeepsNothingOnFailure once a
	// store's failed writes are done, with its kind: the S3 suite checks
	// that no multipart upload is left.
	Failed func(t *testing.T, kind string)
}

// PutBytes writes data as a Put of meta, capped at 1 MiB.
func PutBytes(ctx context.Context, st sessionstore.Store, id string, data []byte, meta sessionstore.Meta) error {
	return st.Put(ctx, id, meta, 1<<20, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// GetBytes reads what a Get of id at most max bytes returns, whole.
func GetBytes(ctx context.Context, st sessionstore.Store, id string, max int64) ([]byte, sessionstore.Meta, error) {
	r, meta, err := st.Get(ctx, id, max)
	if err != nil {
		return nil, meta, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return data, meta, err
}

// Generations: a session's line of generations, its conflicts, a stale
// writer's, a delete and its tombstone.
func Generations(t *testing.T, stores map[string]sessionstore.Store) {
	ctx := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			const id = "0123456789abcdef0123456789abcdef"
			if _, _, err := GetBytes(ctx, st, id, 1<<20); !errors.Is(err, sessionstore.ErrNotFound) {
				t.Fatalf("Get of a new id: %v, want ErrNotFound", err)
			}
			m1 := sessionstore.Meta{Generation: 1, Owner: "aa", Image: "bb"}
			if err := PutBytes(ctx, st, id, []byte("one"), m1); err != nil {
				t.Fatal(err)
			}
			if err := PutBytes(ctx, st, id, []byte("other"), m1); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("second write of generation 1: %v, want ErrConflict", err)
			}
			if err := PutBytes(ctx, st, id, []byte("two"), sessionstore.Meta{Generation: 2, Owner: "aa", Image: "bb"}); err != nil {
				t.Fatal(err)
			}
			blob, meta, err := GetBytes(ctx, st, id, 1<<20)
			if err != nil || string(blob) != "two" || meta != (sessionstore.Meta{Generation: 2, Owner: "aa", Image: "bb"}) {
				t.Fatalf("Get = %q, %+v, %v", blob, meta, err)
			}
			if _, _, err := GetBytes(ctx, st, id, 2); !errors.Is(err, sessionstore.ErrTooLarge) {
				t.Fatalf("Get over the cap: %v", err)
			}
			// A writer that held generation 1 writes 2 (taken) or, once 2 is
			// swept, 2 again beside 3: both are conflicts, and 3 stays.
			if err := PutBytes(ctx, st, id, []byte("three"), sessionstore.Meta{Generation: 3}); err != nil {
				t.Fatal(err)
			}
			if err := PutBytes(ctx, st, id, []byte("stale"), sessionstore.Meta{Generation: 2}); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("stale write of a swept generation: %v, want ErrConflict", err)
			}
			if blob, _, _ := GetBytes(ctx, st, id, 1<<20); string(blob) != "three" {
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
			if _, _, err := GetBytes(ctx, st, id, 1<<20); !errors.Is(err, sessionstore.ErrNotFound) {
				t.Fatalf("Get after Delete: %v", err)
			}
			// The replica that held generation 3 cannot bring it back.
			if err := PutBytes(ctx, st, id, []byte("zombie"), sessionstore.Meta{Generation: 4}); !errors.Is(err, sessionstore.ErrConflict) {
				t.Fatalf("write after Delete: %v, want ErrConflict", err)
			}
			if meta, err := st.Head(ctx, id); err != nil || !meta.Deleted {
				t.Fatalf("Head after Delete = %+v, %v", meta, err)
			}
		})
	}
}

// Race has many writers holding one generation write the next at once:
// exactly one wins, the others get ErrConflict, and the store holds the
// winner's bytes.
func Race(t *testing.T, stores map[string]sessionstore.Store) {
	ctx := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			const id = "race"
			if err := PutBytes(ctx, st, id, []byte("base"), sessionstore.Meta{Generation: 1}); err != nil {
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
						errs[w] = PutBytes(ctx, st, id, fmt.Appendf(nil, "gen %d by %d", gen, w), sessionstore.Meta{Generation: gen})
					})
				}
				close(start)
				wg.Wait()
				winner := OnlyWinner(t, fmt.Sprintf("generation %d", gen), errs)
				blob, meta, err := GetBytes(ctx, st, id, 1<<20)
				if err != nil || meta.Generation != gen || !bytes.Equal(blob, fmt.Appendf(nil, "gen %d by %d", gen, winner)) {
					t.Fatalf("generation %d: store holds %q (generation %d, %v), winner %d", gen, blob, meta.Generation, err, winner)
				}
			}
		})
	}
}

// OnlyWinner returns the one writer of errs whose write succeeded, and
// fails t (naming what was raced for) unless every other one's is a
// conflict.
func OnlyWinner(t *testing.T, what string, errs []error) int {
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

// PutKeepsNothingOnFailure: a Put whose snapshot fails part way, goes over
// its cap, or whose context ends before it is whole leaves no generation
// (nor, in a file:// store, any file but the lock); a Put of several of
// S3's parts streams whole, and Get streams it back.
func PutKeepsNothingOnFailure(t *testing.T, set Set) {
	ctx := context.Background()
	big := make([]byte, 12<<20) // three parts of an upload to S3
	rand.Read(big)
	boom := errors.New("the snapshot broke")
	for name, st := range set.Stores {
		t.Run(name, func(t *testing.T) {
			const id = "streamed-session"
			fail := func(what string, err, want error) {
				t.Helper()
				if !errors.Is(err, want) {
					t.Fatalf("%s: %v, want %v", what, err, want)
				}
				if _, err := st.Head(ctx, id); !errors.Is(err, sessionstore.ErrNotFound) {
					t.Fatalf("%s left a generation: %v", what, err)
				}
				if name == "file" {
					filepath.WalkDir(set.FileDir, func(path string, d fs.DirEntry, err error) error {
						if err == nil && !d.IsDir() && filepath.Base(path) != ".sessionstore.lock" {
							t.Errorf("%s left %s", what, path)
						}
						return nil
					})
				}
			}
			m1 := sessionstore.Meta{Generation: 1, Owner: "aa", Image: "bb"}
			fail("a snapshot that broke after 6 MiB", st.Put(ctx, id, m1, 1<<30, func(w io.Writer) error {
				w.Write(big[:6<<20])
				return boom
			}), boom)
			fail("a snapshot over its cap", st.Put(ctx, id, m1, 10<<20, func(w io.Writer) error {
				_, err := w.Write(big)
				return err
			}), sessionstore.ErrTooLarge)
			cut, cancel := context.WithCancel(ctx)
			fail("a write whose context ended", st.Put(cut, id, m1, 1<<30, func(w io.Writer) error {
				w.Write(big[:6<<20])
				cancel()
				return nil
			}), context.Canceled)
			if set.Failed != nil {
				set.Failed(t, name)
			}

			if err := st.Put(ctx, id, m1, int64(len(big)), func(w io.Writer) error {
				for p := big; len(p) > 0; p = p[min(len(p), 100_000):] {
					if _, err := w.Write(p[:min(len(p), 100_000)]); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.Get(ctx, id, int64(len(big))-1); !errors.Is(err, sessionstore.ErrTooLarge) {
				t.Fatalf("Get under the snapshot's size: %v, want ErrTooLarge", err)
			}
			rd, meta, err := st.Get(ctx, id, int64(len(big)))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			got, err := io.ReadAll(rd)
			if err != nil || !bytes.Equal(got, big) || meta != m1 {
				t.Fatalf("Get: %d bytes (want %d), equal %v, %+v, %v", len(got), len(big), bytes.Equal(got, big), meta, err)
			}
			if err := st.Put(ctx, id, m1, 1<<30, func(w io.Writer) error {
				_, err := w.Write([]byte("late"))
				return err
			}); !errors.Is(err, sessionstore.ErrConflict) || strings.Contains(err.Error(), "making") {
				t.Fatalf("a second generation 1: %v, want ErrConflict", err)
			}
		})
	}
}

// RaceMultipart has writers race on one generation with snapshots of
// several upload parts each: exactly one wins, whole.
func RaceMultipart(t *testing.T, stores map[string]sessionstore.Store) {
	ctx := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			const id, writers = "race-parts", 4
			blobs := make([][]byte, writers)
			for w := range blobs {
				blobs[w] = make([]byte, 11<<20)
				rand.Read(blobs[w])
			}
			errs := make([]error, writers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for w := range writers {
				wg.Go(func() {
					<-start
					errs[w] = st.Put(ctx, id, sessionstore.Meta{Generation: 1}, 1<<30, func(out io.Writer) error {
						_, err := out.Write(blobs[w])
						return err
					})
				})
			}
			close(start)
			wg.Wait()
			winner := OnlyWinner(t, "generation 1", errs)
			rd, _, err := st.Get(ctx, id, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, blobs[winner]) {
				t.Fatalf("the store holds %d bytes, not the winner's (%v)", len(got), err)
			}
		})
	}
}
