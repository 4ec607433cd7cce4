package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// New returns the Store over b: the protocol of generations, create-only
// writes, sweeps and the owner index, written once for every Bucket. The
// Store's Close closes b.
func New(b Bucket) Store { return &store{b: b, root: sessionsRoot} }

// store is the Store over a Bucket.
type store struct {
	b Bucket
	// root is where its ids' keys are: "sessions/", or "runs/" for the
	// Store of Runs, which shares the bucket and does not close it.
	root   string
	shared bool
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

// sessionsRoot and runsRoot are where the keys of sessions and of runs are.
const (
	sessionsRoot = "sessions/"
	runsRoot     = "runs/"
)

func (s *store) prefix(id string) string { return s.root + id + "/" }

func (s *store) key(id string, gen uint64) string {
	return fmt.Sprintf("%s%0*d", s.prefix(id), genDigits, gen)
}

// Runs returns a Store over st's bucket whose ids are runs paused for their
// callers rather than sessions (keys runs/<id>/<generation>), with the same
// protocol of generations: spine serve keeps each paused run's record
// there, so that another replica can continue it (docs/scaling.md, "Paused
// runs"). Its Close leaves the bucket to st's. nil when st is not a Store
// of New.
func Runs(st Store) Store {
	s, ok := st.(*store)
	if !ok {
		return nil
	}
	return &store{b: s.b, root: runsRoot, shared: true}
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
func (s *store) generations(ctx context.Context, id string) ([]uint64, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	keys, err := s.b.List(ctx, s.prefix(id))
	if err != nil {
		return nil, fmt.Errorf("sessionstore: listing %s: %w", id, err)
	}
	var gens []uint64
	for _, k := range keys {
		if gen, ok := parseGen(strings.TrimPrefix(k, s.prefix(id))); ok {
			gens = append(gens, gen) // a listing is in key order
		}
	}
	return gens, nil
}

// newest returns the newest generation for id, or 0.
func (s *store) newest(ctx context.Context, id string) (uint64, error) {
	gens, err := s.generations(ctx, id)
	if err != nil || len(gens) == 0 {
		return 0, err
	}
	return gens[len(gens)-1], nil
}

func (s *store) Newer(ctx context.Context, id string, gen uint64) (bool, error) {
	n, err := s.newest(ctx, id)
	return n > gen, err
}

func (s *store) Head(ctx context.Context, id string) (Meta, error) {
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
		md, err := s.b.Attributes(ctx, s.key(id, gen))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Meta{}, fmt.Errorf("sessionstore: reading %s: %w", id, err)
		}
		return parseMeta(gen, md), nil
	}
	return Meta{}, fmt.Errorf("sessionstore: %s: its newest generation kept changing", id)
}

func (s *store) Get(ctx context.Context, id string, max int64) (io.ReadCloser, Meta, error) {
	for range 3 {
		meta, err := s.Head(ctx, id)
		if err != nil {
			return nil, Meta{}, err
		}
		if meta.Deleted {
			return nil, meta, ErrNotFound
		}
		r, size, err := s.b.NewReader(ctx, s.key(id, meta.Generation))
		if errors.Is(err, fs.ErrNotExist) {
			continue // swept since: a newer generation exists
		}
		if err != nil {
			return nil, Meta{}, fmt.Errorf("sessionstore: reading %s: %w", id, err)
		}
		if size > max {
			r.Close()
			return nil, Meta{}, fmt.Errorf("%w: generation %d of %s is %d bytes, over %d", ErrTooLarge, meta.Generation, id, size, max)
		}
		return &cappedReader{r: r, left: max}, meta, nil
	}
	return nil, Meta{}, fmt.Errorf("sessionstore: %s: its newest generation kept changing", id)
}

// cappedReader reads an object whose size was checked, and fails with
// ErrTooLarge should it yield more than that.
type cappedReader struct {
	r    io.ReadCloser
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

// WriteMemory is the most memory a Put takes beyond what its write function
// takes itself, whatever the snapshot's size: what a Bucket's Create may
// buffer. To S3 (cloudstore): the transfer manager's two part buffers of
// 5 MiB (the one being filled and the one being sent), and its first part,
// read into a slice grown as it fills (about two parts allocated in all, a
// part and a half live at the moment it grows), with room for the requests
// (measured in docs/sessions.md). To GCS and Azure: gocloud's chunk of
// 5 MiB. To file://: nothing, it writes straight to its file. mem:// keeps
// every object in memory, by its nature.
const WriteMemory = 25 << 20

// ReadMemory is the most memory a Get's reader takes, whatever the
// snapshot's size: it streams from the file or the HTTP body.
const ReadMemory = 64 << 10

func (s *store) Put(ctx context.Context, id string, meta Meta, max int64, write func(io.Writer) error) error {
	return s.put(ctx, id, meta, max, write, nil)
}

// put is Put; when written is not nil, it is called with the snapshot's
// size once the generation is created and before it is checked for a newer
// one (the owner index's entry, owners.go): an error of it undoes the
// write.
func (s *store) put(ctx context.Context, id string, meta Meta, max int64, write func(io.Writer) error, written func(size int64) error) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if meta.Generation == 0 {
		return errors.New("sessionstore: generation 0 is none")
	}
	k := s.key(id, meta.Generation)
	size, err := s.create(ctx, k, meta, max, write)
	switch {
	case errors.Is(err, ErrTooLarge):
		return fmt.Errorf("sessionstore: generation %d of %s: %w", meta.Generation, id, err)
	case errors.Is(err, errWrite):
		return err
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: generation %d of %s exists", ErrConflict, meta.Generation, id)
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("sessionstore: writing %s: %w", id, ctx.Err())
	case err != nil:
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
// max bytes, and returns its size. The error of write (errWrite) or its
// going over max (ErrTooLarge) is returned as such, whatever the Bucket
// makes of it.
func (s *store) create(ctx context.Context, k string, meta Meta, max int64, write func(io.Writer) error) (int64, error) {
	var size int64
	var werr error
	err := s.b.Create(ctx, k, formatMeta(meta), func(w io.Writer) error {
		cw := &cappedWriter{w: w, left: max}
		err := write(cw)
		switch {
		case cw.over:
			werr = fmt.Errorf("%w: the snapshot is over %d bytes", ErrTooLarge, max)
		case err != nil:
			werr = fmt.Errorf("%w: %w", errWrite, err)
		}
		size = max - cw.left
		return werr
	})
	if werr != nil {
		return 0, werr
	}
	return size, err
}

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
func (s *store) sweep(ctx context.Context, id string, gens []uint64, gen uint64) {
	for _, g := range gens {
		if g < gen {
			s.b.Delete(ctx, s.key(id, g))
		}
	}
}

func (s *store) Delete(ctx context.Context, id string) error {
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

func (s *store) Close() error {
	if s.shared {
		return nil
	}
	return s.b.Close()
}

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
