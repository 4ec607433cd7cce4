package sessionstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spine-run/spine/sessionstore"
	"gocloud.dev/blob"
)

// noUploads fails the test if the S3 bucket at url holds a multipart
// upload that was neither completed nor aborted.
func noUploads(t *testing.T, url string) {
	t.Helper()
	b, err := blob.OpenBucket(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var client *s3.Client
	if !b.As(&client) {
		t.Fatal("no S3 client")
	}
	name := strings.TrimPrefix(url[:strings.Index(url, "?")], "s3://")
	out, err := client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &name})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Errorf("%d multipart uploads left in the bucket", len(out.Uploads))
	}
}

// TestPutKeepsNothingOnFailure: a Put whose snapshot fails part way, goes
// over its cap, or whose context ends before it is whole leaves no
// generation (nor, in a file:// store, any file but the lock); a Put of
// several of S3's parts streams whole, and Get streams it back.
func TestPutKeepsNothingOnFailure(t *testing.T) {
	ctx := context.Background()
	big := make([]byte, 12<<20) // three parts of an upload to S3
	rand.Read(big)
	boom := errors.New("the snapshot broke")
	set := openStores(t)
	for name, st := range set.stores {
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
					filepath.WalkDir(set.fileDir, func(path string, d fs.DirEntry, err error) error {
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
			if name == "s3" {
				noUploads(t, set.urls[name])
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

// TestStoreRaceMultipart has writers race on one generation with snapshots
// of several upload parts each: exactly one wins, whole.
func TestStoreRaceMultipart(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
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
			winner := onlyWinner(t, "generation 1", errs)
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
