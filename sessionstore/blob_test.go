package sessionstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/storetest"
	"github.com/spine-run/spine/sessionstore"
)

// openStores is every kind of store this module has: file:// in a new
// directory and mem://. (cloudstore's tests run the same suite over a real
// S3-compatible server.)
func openStores(t *testing.T) storetest.Set {
	t.Helper()
	set := storetest.Set{Stores: map[string]sessionstore.Store{}, FileDir: t.TempDir()}
	for name, url := range map[string]string{"mem": "mem://", "file": "file://" + set.FileDir} {
		st, err := sessionstore.Open(context.Background(), url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		t.Cleanup(func() { st.Close() })
		set.Stores[name] = st
	}
	return set
}

func TestStoreGenerations(t *testing.T)         { storetest.Generations(t, openStores(t).Stores) }
func TestStoreRace(t *testing.T)                { storetest.Race(t, openStores(t).Stores) }
func TestPutKeepsNothingOnFailure(t *testing.T) { storetest.PutKeepsNothingOnFailure(t, openStores(t)) }
func TestStoreRaceMultipart(t *testing.T)       { storetest.RaceMultipart(t, openStores(t).Stores) }
func TestStoreOwnerLimit(t *testing.T)          { storetest.OwnerLimit(t, openStores(t)) }
func TestStoreOwnerLimitRace(t *testing.T)      { storetest.OwnerLimitRace(t, openStores(t).Stores) }

func TestStoreIDs(t *testing.T) {
	ctx := context.Background()
	st, err := sessionstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"", "../x", "a/b", "a.b", "a b", "a\x00", "é", strings.Repeat("a", 65), "a\n"} {
		if err := storetest.PutBytes(ctx, st, id, nil, sessionstore.Meta{Generation: 1}); !errors.Is(err, sessionstore.ErrBadID) {
			t.Errorf("Put(%q): %v, want ErrBadID", id, err)
		}
		if _, _, err := storetest.GetBytes(ctx, st, id, 1); !errors.Is(err, sessionstore.ErrBadID) {
			t.Errorf("Get(%q): %v, want ErrBadID", id, err)
		}
	}
	for _, id := range []string{"a", strings.Repeat("Z", 64), "a-b_c9"} {
		if err := sessionstore.CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
}

// TestOpen: the URLs this module opens, and what it refuses, saying why.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, url := range []string{"mem://", "file://" + dir, "file://" + dir + "?prefix=a/", "file://localhost" + dir} {
		st, err := sessionstore.Open(ctx, url)
		if err != nil {
			t.Errorf("Open(%q): %v", url, err)
			continue
		}
		st.Close()
	}
	for url, want := range map[string]string{
		"http://example.invalid/":         "the scheme must be file or mem",
		"s3://bucket?region=x":            "cloudstore",
		"gs://bucket":                     "cloudstore",
		"file://" + dir + "/missing":      "no such file",
		"file://" + dir + "?region=x":     `unknown parameter "region"`,
		"file://host.example/" + dir:      "on this machine",
		"mem://?secret=do-not-print-this": `unknown parameter "secret"`,
	} {
		_, err := sessionstore.Open(ctx, url)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "do-not-print") {
			t.Errorf("Open(%q): %v, want an error saying %q", url, err, want)
		}
	}
}

// TestStorePrefix: a store under a prefix keeps its keys there, apart from
// the same directory's keys without it.
func TestStorePrefix(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := sessionstore.Open(ctx, "file://"+dir+"?prefix=a/")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	plain, err := sessionstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := storetest.PutBytes(ctx, a, "s", []byte("under a"), sessionstore.Meta{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Head(ctx, "s"); !errors.Is(err, sessionstore.ErrNotFound) {
		t.Fatalf("the store without the prefix sees its session: %v", err)
	}
	if data, meta, err := storetest.GetBytes(ctx, a, "s", 1<<20); err != nil || string(data) != "under a" || meta.Generation != 1 {
		t.Fatalf("Get = %q, %+v, %v", data, meta, err)
	}
}

// TestRuns: the Store of Runs keeps the same protocol of generations under
// runs/, apart from the sessions of the same id, and its Close leaves the
// bucket open for the sessions' Store.
func TestRuns(t *testing.T) {
	ctx := context.Background()
	for name, st := range openStores(t).Stores {
		runs := sessionstore.Runs(st)
		storetest.Generations(t, map[string]sessionstore.Store{name: runs})
		if err := storetest.PutBytes(ctx, runs, "r", []byte("a run"), sessionstore.Meta{Generation: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Head(ctx, "r"); !errors.Is(err, sessionstore.ErrNotFound) {
			t.Fatalf("%s: the sessions see the run: %v", name, err)
		}
		if err := storetest.PutBytes(ctx, runs, "r", []byte("again"), sessionstore.Meta{Generation: 1}); !errors.Is(err, sessionstore.ErrConflict) {
			t.Fatalf("%s: a second generation 1: %v, want ErrConflict", name, err)
		}
		runs.Close()
		if err := storetest.PutBytes(ctx, st, "s", []byte("a session"), sessionstore.Meta{Generation: 1}); err != nil {
			t.Fatalf("%s: after the runs' Close: %v", name, err)
		}
	}
	if sessionstore.Runs(nil) != nil {
		t.Fatal("Runs(nil) is not nil")
	}
}

// TestRunsOwnerIndex: a run and a session of the same id and owner are
// apart in the owner index: both count, a write of the one leaves the
// other's entry, and the run's Delete removes its own entry only (else a
// token could leave a session of its uncounted, by restoring it under the
// id of one of its runs and ending that run).
func TestRunsOwnerIndex(t *testing.T) {
	ctx := context.Background()
	owner := sessionstore.Owner("a-token")
	for name, st := range openStores(t).Stores {
		runs := sessionstore.Runs(st)
		put := func(s sessionstore.Store, data string, gen uint64) {
			err := s.PutOwned(ctx, "same", sessionstore.Meta{Generation: gen, Owner: owner}, 1<<20, 1<<20, func(w io.Writer) error {
				_, err := io.WriteString(w, data)
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		put(st, "a session", 1)
		put(runs, "a paused run", 1)
		put(runs, "a paused run, later", 2)
		if n, size, err := st.OwnerBytes(ctx, owner); err != nil || n != 2 || size != int64(len("a session")+len("a paused run, later")) {
			t.Fatalf("%s: OwnerBytes = %d, %d, %v; want the session and the run", name, n, size, err)
		}
		if err := runs.Delete(ctx, "same"); err != nil {
			t.Fatal(err)
		}
		if n, size, err := st.OwnerBytes(ctx, owner); err != nil || n != 1 || size != int64(len("a session")) {
			t.Fatalf("%s: after the run's Delete, OwnerBytes = %d, %d, %v; want the session's", name, n, size, err)
		}
	}
}
