package sessionstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spine-run/spine/sessionstore"
)

// putBytes writes n bytes as id's generation gen.
func putBytes(st sessionstore.Store, id string, gen uint64, n int) error {
	return st.Put(context.Background(), id, sessionstore.Meta{Generation: gen}, 1<<20, func(w io.Writer) error {
		_, err := w.Write(bytes.Repeat([]byte{'s'}, n))
		return err
	})
}

// filesBytes is the bytes of the files under dir.
func filesBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestFileStoreMaxBytes: a file:// store's max_bytes bounds its folder: a
// write past it fails with ErrFull and keeps nothing, a temporary file
// being written counts, a delete frees room, and a store opened on a
// folder counts what is there (issue 34.1, 34.13).
func TestFileStoreMaxBytes(t *testing.T) {
	dir := t.TempDir()
	const max = 10000
	url := "file://" + dir + "?max_bytes=" + strconv.Itoa(max)
	st, err := sessionstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"a", "b"} {
		if err := putBytes(st, id, 1, 4000); err != nil {
			t.Fatal(err)
		}
	}
	if err := putBytes(st, "c", 1, 4000); !errors.Is(err, sessionstore.ErrFull) {
		t.Fatalf("a write past max_bytes: %v, want ErrFull", err)
	}
	if n := filesBytes(dir); n > max {
		t.Fatalf("the folder holds %d bytes, over %d", n, max)
	}
	if _, err := st.Head(context.Background(), "c"); !errors.Is(err, sessionstore.ErrNotFound) {
		t.Fatalf("the refused write left c: %v", err)
	}

	// A write under way holds its bytes until it ends.
	midway, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- st.Put(context.Background(), "d", sessionstore.Meta{Generation: 1}, 1<<20, func(w io.Writer) error {
			w.Write(bytes.Repeat([]byte{'d'}, 1500))
			close(midway)
			<-release
			return errors.New("given up")
		})
	}()
	<-midway
	if err := putBytes(st, "e", 1, 1000); !errors.Is(err, sessionstore.ErrFull) {
		t.Errorf("a write while another's temporary file holds 1500 bytes: %v, want ErrFull", err)
	}
	close(release)
	<-done
	if err := putBytes(st, "e", 1, 1000); err != nil {
		t.Fatalf("once the other write gave up: %v", err)
	}

	if err := st.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := putBytes(st, "c", 1, 4000); err != nil {
		t.Fatalf("after a delete freed room: %v", err)
	}
	again, err := sessionstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := putBytes(again, "f", 1, 1000); !errors.Is(err, sessionstore.ErrFull) {
		t.Errorf("a store opened on the full folder: %v, want ErrFull", err)
	}
	if n := filesBytes(dir); n > max {
		t.Fatalf("the folder holds %d bytes, over %d", n, max)
	}
	if _, err := sessionstore.Open(context.Background(), "file://"+dir+"?max_bytes=lots"); err == nil {
		t.Error("max_bytes=lots was taken")
	}
}

// TestFileStoreExpire: Expire removes every object of the sessions whose
// newest object was written before its time, tombstones included, and
// their folders, and leaves the others and those the caller keeps (issue
// 34.1).
func TestFileStoreExpire(t *testing.T) {
	dir := t.TempDir()
	st, err := sessionstore.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"old", "deleted", "held", "new"} {
		if err := putBytes(st, id, 1, 100); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete(context.Background(), "deleted"); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour)
	for _, id := range []string{"old", "deleted", "held"} {
		filepath.WalkDir(filepath.Join(dir, "sessions", id), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				os.Chtimes(path, past, past)
			}
			return nil
		})
	}
	n, err := sessionstore.Expire(context.Background(), st, time.Now().Add(-time.Hour), func(id string) bool { return id == "held" })
	if err != nil || n != 2 {
		t.Fatalf("Expire: %d, %v; want 2", n, err)
	}
	for _, id := range []string{"old", "deleted"} {
		if _, err := os.Stat(filepath.Join(dir, "sessions", id)); !os.IsNotExist(err) {
			t.Errorf("%s's folder is still there: %v", id, err)
		}
	}
	for _, id := range []string{"new", "held"} {
		if _, err := st.Head(context.Background(), id); err != nil {
			t.Errorf("the %s session: %v", id, err)
		}
	}
	if err := putBytes(st, "old", 1, 100); err != nil { // its folder is made again
		t.Errorf("writing an expired id anew: %v", err)
	}
	mem, _ := sessionstore.Open(context.Background(), "mem://")
	if _, err := sessionstore.Expire(context.Background(), mem, time.Now(), nil); err == nil {
		t.Error("a mem:// store expired")
	}
}
