package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/fileblob"  // file:///dir
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/memblob"   // mem://
	_ "gocloud.dev/blob/s3blob"    // s3://, any S3-compatible server
	"gocloud.dev/gcerrors"
)

// Open returns the Store at url, through gocloud.dev/blob: s3://BUCKET
// (endpoint, region and use_path_style in the query, as gocloud reads
// them, for any S3-compatible server), gs://BUCKET, azblob://CONTAINER,
// file:///DIR or mem://. A prefix query parameter puts every key under
// that prefix. Credentials come from the environment, as each cloud's SDK
// reads them.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	switch u.Scheme {
	case "s3", "gs", "azblob", "file", "mem":
	default:
		return nil, fmt.Errorf("sessionstore: %q: the scheme must be s3, gs, azblob, file or mem", u.Scheme)
	}
	if u.Scheme == "file" && !u.Query().Has("no_tmp_dir") {
		// A file is written beside its place and renamed into it: never
		// across file systems, nor through a shared temporary directory.
		q := u.Query()
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
		rawURL = u.String()
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: opening %s: %w", redact(u), err)
	}
	st := &blobStore{b: b}
	var client *s3.Client
	if b.As(&client) {
		st.s3 = client
	}
	if u.Scheme == "file" {
		st.lockPath = filepath.Join(filepath.FromSlash(u.Path), lockName)
	}
	return st, nil
}

// redact is u without its user information and query, which may hold
// secrets.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery = nil, ""
	return c.String()
}

// blobStore is the Store over a gocloud bucket.
type blobStore struct {
	b        *blob.Bucket
	lockPath string     // file:// only: the lock file of commitLock
	s3       *s3.Client // s3:// only: the client, for the uploads' options
}

// The metadata keys (lower case: some stores fold them).
const (
	metaGeneration = "generation"
	metaOwner      = "owner"
	metaImage      = "image"
	metaDeleted    = "deleted"
)

// genDigits is how wide a generation is in a key: every uint64 fits, and
// keys sort as their generations do.
const genDigits = 20

func prefix(id string) string { return "sessions/" + id + "/" }

func key(id string, gen uint64) string {
	return fmt.Sprintf("%s%0*d", prefix(id), genDigits, gen)
}

// parseGen reads a generation as keys write it: genDigits decimal digits,
// not 0. ok is false for anything else, which a listing skips.
func parseGen(s string) (gen uint64, ok bool) {
	if len(s) != genDigits {
		return 0, false
	}
	gen, err := strconv.ParseUint(s, 10, 64) // digits only: no sign, no '_' in base 10
	return gen, err == nil && gen != 0
}

// generations lists the generations the store holds for id, in ascending
// order. Keys under the session's prefix that are not generations are
// ignored.
func (s *blobStore) generations(ctx context.Context, id string) ([]uint64, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	for range 8 {
		gens, err := s.list(ctx, id)
		// A directory's listing meets a file another writer is renaming
		// into place: list again.
		if gcerrors.Code(err) != gcerrors.NotFound {
			return gens, err
		}
	}
	return s.list(ctx, id)
}

// list lists once what generations lists.
func (s *blobStore) list(ctx context.Context, id string) ([]uint64, error) {
	var gens []uint64
	it := s.b.List(&blob.ListOptions{Prefix: prefix(id)})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sessionstore: listing %s: %w", id, err)
		}
		if gen, ok := parseGen(strings.TrimPrefix(obj.Key, prefix(id))); ok {
			gens = append(gens, gen) // a listing is in key order
		}
	}
	return gens, nil
}

// newest returns the newest generation for id, or 0.
func (s *blobStore) newest(ctx context.Context, id string) (uint64, error) {
	gens, err := s.generations(ctx, id)
	if err != nil || len(gens) == 0 {
		return 0, err
	}
	return gens[len(gens)-1], nil
}

func (s *blobStore) Newer(ctx context.Context, id string, gen uint64) (bool, error) {
	n, err := s.newest(ctx, id)
	return n > gen, err
}

func (s *blobStore) Head(ctx context.Context, id string) (Meta, error) {
	// A generation read as newest may be swept by a writer of a newer one
	// before its attributes are read: list again.
	for range 3 {
		gen, err := s.newest(ctx, id)
		if err != nil {
			return Meta{}, err
		}
		if gen == 0 {
			return Meta{}, ErrNotFound
		}
		attrs, err := s.b.Attributes(ctx, key(id, gen))
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue
		}
		if err != nil {
			return Meta{}, fmt.Errorf("sessionstore: reading %s: %w", id, err)
		}
		return parseMeta(gen, attrs.Metadata), nil
	}
	return Meta{}, fmt.Errorf("sessionstore: %s: its newest generation kept changing", id)
}

func (s *blobStore) Get(ctx context.Context, id string, max int64) (io.ReadCloser, Meta, error) {
	for range 3 {
		meta, err := s.Head(ctx, id)
		if err != nil {
			return nil, Meta{}, err
		}
		if meta.Deleted {
			return nil, meta, ErrNotFound
		}
		r, err := s.b.NewReader(ctx, key(id, meta.Generation), nil)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue // swept since: a newer generation exists
		}
		if err != nil {
			return nil, Meta{}, fmt.Errorf("sessionstore: reading %s: %w", id, err)
		}
		if r.Size() > max {
			r.Close()
			return nil, Meta{}, fmt.Errorf("%w: generation %d of %s is %d bytes, over %d", ErrTooLarge, meta.Generation, id, r.Size(), max)
		}
		return &cappedReader{r: r, left: max}, meta, nil
	}
	return nil, Meta{}, fmt.Errorf("sessionstore: %s: its newest generation kept changing", id)
}

// cappedReader reads an object whose size was checked, and fails with
// ErrTooLarge should it yield more than that.
type cappedReader struct {
	r    *blob.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		if n, _ := c.r.Read(p[:min(len(p), 1)]); n > 0 {
			return 0, fmt.Errorf("%w: the object grew while it was read", ErrTooLarge)
		}
		return 0, io.EOF
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	return n, err
}

func (c *cappedReader) Close() error { return c.r.Close() }

// The writes' buffers: an object store's upload is cut in parts of
// writeBuffer bytes, one in flight at a time (S3's smallest part is 5 MiB).
// A file:// store writes straight to its file.
const writeBuffer = 5 << 20

// WriteMemory is the most memory a Put takes beyond what its write function
// takes itself, whatever the snapshot's size. To S3: the transfer
// manager's two part buffers (the one being filled and the one being sent),
// and its first part, read into a slice grown as it fills (about two parts
// allocated in all, a part and a half live at the moment it grows), with
// room for the requests (measured in docs/sessions.md). To GCS
// and Azure: gocloud's chunk of writeBuffer bytes. To file://: nothing, it
// writes straight to its file. mem:// keeps every object in memory, by its
// nature.
const WriteMemory = 5 * writeBuffer

// ReadMemory is the most memory a Get's reader takes, whatever the
// snapshot's size: it streams from the file or the HTTP body.
const ReadMemory = 64 << 10

func (s *blobStore) Put(ctx context.Context, id string, meta Meta, max int64, write func(io.Writer) error) error {
	return s.put(ctx, id, meta, max, write, nil)
}

// put is Put; when written is not nil, it is called with the snapshot's
// size once the generation is created and before it is checked for a newer
// one (the owner index's entry, owners.go): an error of it undoes the
// write.
func (s *blobStore) put(ctx context.Context, id string, meta Meta, max int64, write func(io.Writer) error, written func(size int64) error) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if meta.Generation == 0 {
		return errors.New("sessionstore: generation 0 is none")
	}
	k := key(id, meta.Generation)
	size, err := s.create(ctx, k, meta, max, write)
	switch {
	case errors.Is(err, ErrTooLarge):
		return fmt.Errorf("sessionstore: generation %d of %s: %w", meta.Generation, id, err)
	case gcerrors.Code(err) == gcerrors.FailedPrecondition:
		return fmt.Errorf("%w: generation %d of %s exists", ErrConflict, meta.Generation, id)
	case errors.Is(err, errWrite):
		return err
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("sessionstore: writing %s: %w", id, ctx.Err())
	case err != nil:
		// Some stores answer a lost race otherwise (S3's 409 while another
		// conditional write of the key is in flight): the key is there.
		if ok, _ := s.b.Exists(ctx, k); ok {
			return fmt.Errorf("%w: generation %d of %s exists", ErrConflict, meta.Generation, id)
		}
		return fmt.Errorf("sessionstore: writing %s: %w", id, err)
	}
	if written != nil {
		if err := written(size); err != nil {
			s.b.Delete(ctx, k)
			return err
		}
	}
	gens, err := s.generations(ctx, id)
	if err != nil {
		return err // written, and not swept: the next write sweeps
	}
	if len(gens) == 0 || gens[len(gens)-1] > meta.Generation {
		// This writer held an older generation, whose successor was swept:
		// the object just written must not stand beside the newer one.
		s.b.Delete(ctx, k)
		return fmt.Errorf("%w: %s has a generation after %d", ErrConflict, id, meta.Generation)
	}
	s.sweep(ctx, id, gens, meta.Generation)
	return nil
}

// errWrite marks the error of a Put's write function.
var errWrite = errors.New("sessionstore: making the snapshot")

// create writes the object k, create-only, with what write writes, at most
// max bytes, and returns its size. On any failure the write is aborted (its
// context canceled), which every gocloud driver takes as: keep nothing.
func (s *blobStore) create(ctx context.Context, k string, meta Meta, max int64, write func(io.Writer) error) (int64, error) {
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	w, err := s.b.NewWriter(wctx, k, &blob.WriterOptions{
		IfNotExist:     true,
		ContentType:    "application/octet-stream",
		Metadata:       formatMeta(meta),
		BufferSize:     writeBuffer,
		MaxConcurrency: 1,
		BeforeWrite:    s.uploadOptions,
	})
	if err != nil {
		return 0, err
	}
	cw := &cappedWriter{w: w, left: max}
	err = write(cw)
	switch {
	case cw.over:
		err = fmt.Errorf("%w: the snapshot is over %d bytes", ErrTooLarge, max)
	case err != nil:
		err = fmt.Errorf("%w: %w", errWrite, err)
	}
	if err != nil {
		abort()
		w.Close()
		return 0, err
	}
	unlock, err := s.commitLock()
	if err != nil {
		abort()
		w.Close()
		return 0, fmt.Errorf("sessionstore: writing %s: %w", k, err)
	}
	defer unlock()
	return max - cw.left, w.Close()
}

// uploadOptions bounds the memory of an upload to S3 (gocloud's
// BeforeWrite): gocloud sets the part size and concurrency, but S3's
// transfer manager reads the first 16 MiB of an upload into one slice grown
// as it fills, before it decides on a multipart upload. The upload's client
// is made again with the same S3 client and checksum setting, and that
// threshold at one part. An upload that fails or is aborted is aborted in
// the store too, within abortTimeout even when its context ended, so that
// its parts do not linger.
func (s *blobStore) uploadOptions(as func(any) bool) error {
	var tm *transfermanager.Client
	if s.s3 == nil || !as(&tm) {
		return nil
	}
	checksums := s.s3.Options().RequestChecksumCalculation
	*tm = *transfermanager.New(s.s3, func(o *transfermanager.Options) {
		o.PartSizeBytes = writeBuffer
		o.MultipartUploadThreshold = writeBuffer
		o.Concurrency = 1
		o.RequestChecksumCalculation = checksums
		o.FailTimeout = abortTimeout
	})
	return nil
}

// abortTimeout bounds the abort of a failed multipart upload.
const abortTimeout = 10 * time.Second

// cappedWriter passes at most left bytes to w, and fails past them.
type cappedWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, ErrTooLarge
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}

// sweep deletes the generations of gens before gen. A failure is left for
// the next write's sweep.
func (s *blobStore) sweep(ctx context.Context, id string, gens []uint64, gen uint64) {
	for _, g := range gens {
		if g < gen {
			s.b.Delete(ctx, key(id, g))
		}
	}
}

func (s *blobStore) Delete(ctx context.Context, id string) error {
	for range 5 {
		meta, err := s.Head(ctx, id)
		if errors.Is(err, ErrNotFound) || err == nil && meta.Deleted {
			return nil
		}
		if err != nil {
			return err
		}
		// The owner index forgets the session before the tombstone (so that
		// a crash between the two leaves no entry) and after it (so that an
		// entry a write made meanwhile goes too: owners.go).
		if err := s.unindex(ctx, meta.Owner, id); err != nil {
			return err
		}
		tomb := Meta{Generation: meta.Generation + 1, Owner: meta.Owner, Deleted: true}
		err = s.Put(ctx, id, tomb, 0, func(io.Writer) error { return nil })
		if errors.Is(err, ErrConflict) {
			continue // written meanwhile: delete the newer one
		}
		if err != nil {
			return err
		}
		return s.unindex(ctx, meta.Owner, id)
	}
	return fmt.Errorf("%w: %s kept changing while it was deleted", ErrConflict, id)
}

func (s *blobStore) Close() error { return s.b.Close() }

func formatMeta(m Meta) map[string]string {
	md := map[string]string{
		metaGeneration: strconv.FormatUint(m.Generation, 10),
		metaOwner:      m.Owner,
		metaImage:      m.Image,
	}
	if m.Deleted {
		md[metaDeleted] = "true"
	}
	return md
}

// parseMeta reads the metadata of generation gen. The key names the
// generation; the metadata's copy is informational.
func parseMeta(gen uint64, md map[string]string) Meta {
	return Meta{Generation: gen, Owner: md[metaOwner], Image: md[metaImage], Deleted: md[metaDeleted] == "true"}
}
