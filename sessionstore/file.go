package sessionstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine/internal/filelock"
)

// A file:// store is a directory: each object is the file at its key, and
// its metadata is in the file beside it named with ".attrs" added (the
// layout gocloud.dev's fileblob driver writes, so that a directory written
// through either is read by the other). A Create writes a temporary file
// beside the object's place ("KEY.<nanoseconds in hex>.tmp"), and then,
// only if the key is still absent, writes the metadata and renames the file
// into place: the object appears whole, with its metadata.
//
// The directory may be written by replicas on one machine (or on one shared
// file system) at once. The check that the key is absent and the rename are
// one step only under a lock: a Create takes an exclusive flock(2) on one
// lock file in the directory around them (commitLock), so that its writes
// are create-only across processes. The lock is held for the check and the
// rename only, never while a snapshot streams to its temporary file.
//
// flock is advisory: a process writing the directory without this package
// is not held back. On a network file system it is as good as that file
// system's locks (NFS v4 has them; check yours). Where flock does not
// exist (package filelock) there is no lock, and docs/scaling.md says so.
//
// A writer holds a flock on its temporary file until the file is renamed
// into place or removed. A writer killed mid-write (kill -9) leaves its
// temporary file, unheld: opening the store removes such files
// (cleanTemps), and only those, so that replicas opening a directory
// others write at that moment take nothing from them.

// lockName is the lock file, at the directory's root, out of every key the
// store lists.
const lockName = ".sessionstore.lock"

// The names beside an object's that are not keys: its metadata and its
// temporary files. No key of a Store ends so.
const (
	attrsExt = ".attrs"
	tempExt  = ".tmp"
)

// fileBucket is the Bucket over the directory dir.
type fileBucket struct {
	dir string
	max int64 // when positive, the most bytes its files may hold (ErrFull)

	mu   sync.Mutex
	used int64 // with max: the bytes of its files, temporary files included
}

// ErrFull is a write to a file:// store past its max_bytes: nothing of it
// is kept.
var ErrFull = errors.New("sessionstore: the store's directory is full (its max_bytes)")

// openDir is the Bucket over the directory dir, which must exist, holding
// at most max bytes when max is positive.
func openDir(dir string, max int64) (*fileBucket, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if _, err := cleanTemps(dir); err != nil {
		return nil, fmt.Errorf("removing the temporary files writers that died left: %w", err)
	}
	b := &fileBucket{dir: dir, max: max}
	if max > 0 {
		used, err := stored(dir)
		if err != nil {
			return nil, err
		}
		b.used = used
	}
	return b, nil
}

// stored returns the bytes of the files of the store in dir: every file in
// a folder of it (keys have a '/'), not those at its top (its lock) nor in
// the folders of Runners whose SessionOptions.Dir it is too
// (runnerFolder).
func stored(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() && runnerFolder(dir, path, d) {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Dir(path) == filepath.Clean(dir) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// runnerFolder reports whether d, at path in the store's folder dir, is a
// folder of a Runner's whose SessionOptions.Dir dir is too (spine serve's
// --session-dir): a folder at the top whose name begins with ".spine-". It
// is not the store's.
func runnerFolder(dir, path string, d fs.DirEntry) bool {
	return strings.HasPrefix(d.Name(), ".spine-") && filepath.Dir(path) == filepath.Clean(dir)
}

// reserve counts n more bytes of the store's, or refuses them (ErrFull)
// when they would take it past max.
func (b *fileBucket) reserve(n int64) error {
	if b.max <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return fmt.Errorf("%w: it holds %d bytes of %d", ErrFull, b.used, b.max)
	}
	b.used += n
	return nil
}

// release counts n bytes fewer.
func (b *fileBucket) release(n int64) {
	if b.max <= 0 || n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used returns the bytes of the store's files as it counts them (max_bytes
// set), temporary files included; 0 without max_bytes.
func (b *fileBucket) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// countedWriter is a temporary file's writer: each write is reserved
// against the store's max first.
type countedWriter struct {
	b *fileBucket
	f *os.File
	n int64 // bytes reserved
}

func (w *countedWriter) Write(p []byte) (int, error) {
	if err := w.b.reserve(int64(len(p))); err != nil {
		return 0, err
	}
	w.n += int64(len(p))
	return w.f.Write(p)
}

// path is the file of key, which must be a relative '/'-separated name
// that stays in the directory.
func (b *fileBucket) path(key string) (string, error) {
	if key == "" || !fs.ValidPath(key) || strings.HasSuffix(key, attrsExt) || strings.HasSuffix(key, tempExt) {
		return "", fmt.Errorf("%q cannot be a key", key)
	}
	return filepath.Join(b.dir, filepath.FromSlash(key)), nil
}

func (b *fileBucket) List(ctx context.Context, prefix string) ([]string, error) {
	// Walk the deepest directory the prefix names, and keep the keys under
	// it that begin with the prefix.
	root := prefix[:strings.LastIndex(prefix, "/")+1]
	if root != "" && !fs.ValidPath(strings.TrimSuffix(root, "/")) {
		return nil, fmt.Errorf("%q cannot be a prefix", prefix)
	}
	var keys []string
	err := filepath.WalkDir(filepath.Join(b.dir, filepath.FromSlash(root)), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // gone since its directory was read
			}
			return err
		}
		if d.IsDir() {
			if runnerFolder(b.dir, path, d) {
				return filepath.SkipDir
			}
			return ctx.Err()
		}
		name := d.Name()
		if strings.HasSuffix(name, attrsExt) || strings.HasSuffix(name, tempExt) || name == lockName {
			return nil
		}
		rel, err := filepath.Rel(b.dir, path)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	return keys, nil
}

// attrs is what the ".attrs" file holds, as fileblob writes it.
type attrs struct {
	ContentType string            `json:"user.content_type"`
	Metadata    map[string]string `json:"user.metadata"`
}

func (b *fileBucket) Attributes(ctx context.Context, key string) (map[string]string, error) {
	path, err := b.path(key)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path + attrsExt)
	if os.IsNotExist(err) {
		// An object without metadata (fileblob writes none when it has
		// none), or one removed since it was found.
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var a attrs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("the metadata of %s: %w", key, err)
	}
	return a.Metadata, nil
}

func (b *fileBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	path, err := b.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func (b *fileBucket) Create(ctx context.Context, key string, md map[string]string, write func(io.Writer) error) error {
	path, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	f, err := createTemp(path)
	if os.IsNotExist(err) { // its folder emptied and removed meanwhile (Expire)
		if err = os.MkdirAll(filepath.Dir(path), 0o777); err == nil {
			f, err = createTemp(path)
		}
	}
	if err != nil {
		return err
	}
	// Removed on failure; renamed on success, and then a no-op. The file is
	// closed (its hold released) only after that: a cleaner never removes
	// it while it is written or renamed.
	cw := &countedWriter{b: b, f: f}
	committed := false
	defer func() {
		os.Remove(f.Name())
		f.Close()
		if !committed {
			b.release(cw.n)
		}
	}()
	err = write(cw)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return err
	}
	unlock, err := b.commitLock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", key, fs.ErrExist)
	}
	raw, err := json.Marshal(attrs{ContentType: "application/octet-stream", Metadata: md})
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	if err := b.reserve(int64(len(raw))); err != nil {
		return err
	}
	if err := os.WriteFile(path+attrsExt, raw, 0o666); err != nil {
		os.Remove(path + attrsExt)
		b.release(int64(len(raw)))
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(path + attrsExt)
		b.release(int64(len(raw)))
		return err
	}
	committed = true
	return nil
}

// createTemp makes a new temporary file beside path, held (filelock.Hold)
// until it is closed. A cleaner (cleanTemps) may remove a file between its
// making and its hold: then another is made.
func createTemp(path string) (*os.File, error) {
	for try := 0; ; try++ {
		name := path + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + tempExt
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if os.IsExist(err) && try < 10000 {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := filelock.Hold(f); err != nil {
			f.Close()
			os.Remove(name)
			return nil, fmt.Errorf("holding %s: %w", name, err)
		}
		if same(f, name) {
			return f, nil
		}
		f.Close() // removed by a cleaner before it was held
		if try >= 10000 {
			return nil, fmt.Errorf("%s: its temporary files kept being removed", path)
		}
	}
}

// same reports whether the file at name is f.
func same(f *os.File, name string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	at, err := os.Lstat(name)
	return err == nil && os.SameFile(fi, at)
}

// cleanTemps removes the temporary files under dir that no live writer
// holds: those a writer that died (kill -9, a crash) left behind, which
// would otherwise stay forever. A file a writer of this process or
// another holds is left. Where flock(2) does not exist none is removed.
// It returns how many it removed.
func cleanTemps(dir string) (int, error) {
	removed := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() && runnerFolder(dir, path, d) {
			return filepath.SkipDir
		}
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), tempExt) {
			return nil
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil // renamed or removed since it was listed
		}
		defer f.Close()
		if filelock.TryHold(f) && same(f, path) && os.Remove(path) == nil {
			removed++
		}
		return nil
	})
	return removed, err
}

func (b *fileBucket) Delete(ctx context.Context, key string) error {
	path, err := b.path(key)
	if err != nil {
		return err
	}
	for _, name := range []string{path, path + attrsExt} {
		fi, statErr := os.Lstat(name)
		if err := os.Remove(name); err != nil && !os.IsNotExist(err) {
			return err
		} else if err == nil && statErr == nil {
			b.release(fi.Size())
		}
	}
	return nil
}

func (b *fileBucket) Close() error { return nil }

// commitLock takes the directory's lock for the end of a create-only
// write; unlock releases it.
func (b *fileBucket) commitLock() (unlock func(), err error) {
	unlock, err = filelock.Lock(filepath.Join(b.dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("the store's lock: %w", err)
	}
	return unlock, nil
}
