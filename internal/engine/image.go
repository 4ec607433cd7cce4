package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spine-run/spine/internal/atomicfile"
)

// isZero reports whether b holds only zero bytes.
func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// StartMode says how each run's Guest starts.
type StartMode int

const (
	// StartAuto starts from the prepared image, copy-on-write where the
	// platform allows it (Linux), by copying elsewhere.
	StartAuto StartMode = iota
	// StartFresh starts CPython from scratch for every run: slow (about
	// 140 ms a run), kept for comparison and debugging. No pool.
	StartFresh
	// StartCopy copies the prepared image into each new instance.
	StartCopy
	// StartCOW maps the prepared image copy-on-write (Linux only).
	StartCOW
)

func (m StartMode) String() string {
	switch m {
	case StartAuto:
		return "auto"
	case StartFresh:
		return "fresh"
	case StartCopy:
		return "copy"
	case StartCOW:
		return "cow"
	}
	return fmt.Sprintf("StartMode(%d)", int(m))
}

// image is linear memory captured after CPython started and warmed up.
type image struct {
	size  int         // bytes, a whole number of wasm pages
	data  []byte      // the bytes, for StartCopy
	memfd *memfdImage // the bytes in a sealed memfd, for StartCOW
}

func (img *image) pages() uint32 { return uint32(img.size / WasmPageSize) }

func (img *image) close() {
	if img != nil && img.memfd != nil {
		img.memfd.close()
	}
}

// imagePath is where the cache folder dir keeps the image named name.
func imagePath(dir, name string) string {
	return filepath.Join(dir, "images", name+".img")
}

// prepareImage captures the image (New found none in the cache folder),
// stores it there, and makes it ready for the engine's mode (StartCopy or
// StartCOW).
func (e *Engine) prepareImage(ctx context.Context) (*image, error) {
	var path string
	if e.cacheDir != "" {
		path = imagePath(e.cacheDir, e.imageName)
	}
	cow := e.mode == StartCOW
	data, err := e.captureImage(ctx)
	if err != nil {
		return nil, err
	}
	if path != "" {
		// A cache: failing to write it costs only time. Captures of one
		// key are the same bytes (randSource), and a session's snapshot is
		// a difference from the image; should a capture ever differ, every
		// Runner using the cache still takes the image written first, this
		// one or one another process wrote meanwhile.
		if writeImage(path, data) == nil {
			if first, err := loadImage(path, e.cfg.MemoryLimit, cow); err == nil {
				return first, nil
			}
		}
	}
	img := &image{size: len(data)}
	if cow {
		if img.memfd, err = newMemfdImage(data); err != nil {
			return nil, fmt.Errorf("spine: copy-on-write image: %w", err)
		}
	} else {
		img.data = data
	}
	return img, nil
}

// captureImage starts CPython from scratch, runs the warm-up in it, and
// copies its memory.
func (e *Engine) captureImage(ctx context.Context) ([]byte, error) {
	ctx = context.WithValue(ctx, captureKey{}, true)
	inst, err := e.newInstance(ctx, nil, 0)
	if err != nil {
		return nil, err
	}
	defer inst.Close()
	if e.cfg.Warm != nil {
		if err := e.cfg.Warm(inst.Begin(ctx, nil), inst); err != nil {
			return nil, fmt.Errorf("spine: preparing the image: %w", err)
		}
	}
	mem := inst.mod.Memory()
	data, ok := mem.Read(0, mem.Size())
	if !ok {
		return nil, fmt.Errorf("%w: cannot read memory", ErrGuest)
	}
	return append([]byte(nil), data...), nil
}

// An image file is a header of imageHeaderSize bytes, then the image:
//
//	offset  0  imageMagic, 12 bytes
//	offset 12  imageFileVersion, uint32 little-endian
//	offset 16  the image's length in bytes, uint64 little-endian
//	offset 24  CRC-32C of the whole file, these four bytes counted as zero, uint32 little-endian
//	offset 28  zeros up to imageHeaderSize
//
// The header fills one file-system block, so the image's pages stay aligned and
// its zero pages can be holes. The checksum catches a torn write, a truncated
// file or flipped bits; it is no defence against someone who can write the
// cache folder, and need not be: such a person could rewrite the checksum too.
// CRC-32C because the CPU computes it at about 10 GB/s: summed as it is read,
// it adds about 1.5 ms to loading a 32 MiB image, where SHA-256 would add
// 25-29 ms, a fifth of a cached New.
const (
	imageMagic       = "spine image\x00"
	imageFileVersion = 1
	imageHeaderSize  = 4096
)

// castagnoli selects CRC-32C, which amd64 and arm64 compute in hardware.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// imageHeader returns the header of an image file holding data.
func imageHeader(data []byte) []byte {
	h := make([]byte, imageHeaderSize)
	copy(h, imageMagic)
	binary.LittleEndian.PutUint32(h[12:], imageFileVersion)
	binary.LittleEndian.PutUint64(h[16:], uint64(len(data)))
	binary.LittleEndian.PutUint32(h[24:], crc32.Update(crc32.Checksum(h, castagnoli), castagnoli, data))
	return h
}

// loadImage returns the image cached at path: in a sealed memfd when cow,
// else as bytes. A file that is not a whole, intact image of this format, or
// one larger than limit, is removed and reported as an error, so that the
// caller captures the image anew.
func loadImage(path string, limit uint64, cow bool) (*image, error) {
	if path == "" {
		return nil, errors.New("no image cache")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := loadImageFile(f, limit, cow)
	if err != nil {
		removeIfSame(f, path)
		return nil, fmt.Errorf("cached image %s: %w", path, err)
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // in use: see pruneImages
	return img, nil
}

func loadImageFile(f *os.File, limit uint64, cow bool) (*image, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h := make([]byte, imageHeaderSize)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, errors.New("no header")
	}
	if string(h[:len(imageMagic)]) != imageMagic || binary.LittleEndian.Uint32(h[12:]) != imageFileVersion {
		return nil, errors.New("not an image of this format")
	}
	n := binary.LittleEndian.Uint64(h[16:])
	if n == 0 || n%WasmPageSize != 0 || n > limit || uint64(info.Size()) != imageHeaderSize+n {
		return nil, fmt.Errorf("%d bytes for an image of %d", info.Size(), n)
	}
	want := binary.LittleEndian.Uint32(h[24:])
	clear(h[24:28])
	sum := crc32.Checksum(h, castagnoli)
	img := &image{size: int(n)}
	if cow {
		// Straight from the file into the memfd, its holes left holes: a
		// new process's New spent most of its time reading the whole
		// image into fresh memory, zeros included, to copy it again.
		m, got, err := fileMemfdImage(f, img.size, sum)
		if err != nil {
			return nil, err
		}
		if got != want {
			m.close()
			return nil, errors.New("checksum mismatch")
		}
		img.memfd = m
		return img, nil
	}
	data := make([]byte, n)
	// A chunk at a time, summed while it is still in the CPU's cache.
	for off := 0; off < len(data); off += 1 << 20 {
		chunk := data[off:min(off+1<<20, len(data))]
		if _, err := io.ReadFull(f, chunk); err != nil {
			return nil, err
		}
		sum = crc32.Update(sum, castagnoli, chunk)
	}
	if sum != want {
		return nil, errors.New("checksum mismatch")
	}
	img.data = data
	return img, nil
}

// zeroChunk is what crcZeros sums: a hole of an image file, without reading it.
var zeroChunk [64 << 10]byte

// crcZeros continues the CRC-32C sum over n zero bytes.
func crcZeros(sum uint32, n int) uint32 {
	for n > 0 {
		k := min(n, len(zeroChunk))
		sum = crc32.Update(sum, castagnoli, zeroChunk[:k])
		n -= k
	}
	return sum
}

// imageMaxAge is how long an image nobody loaded stays in the cache, and
// maxCachedImages how many images it keeps at most (the ones loaded last).
// Every artifact, warm-up and tool list has an image of its own.
const (
	imageMaxAge     = 14 * 24 * time.Hour
	maxCachedImages = 8
)

// imageTempPrefix begins the name of an image file being written, and
// tempMaxAge is how long such a file may stay: longer means its writer died.
const (
	imageTempPrefix = ".image-"
	tempMaxAge      = time.Hour
)

// pruneImages removes from dir the images other than keep that no Runner has
// loaded for imageMaxAge, all but the maxCachedImages loaded last, the
// temporary files of writers that died, and the hot pages (hot.go) of the
// images no longer there.
func pruneImages(dir, keep string) {
	pruneFiles(dir, keep, ".img", maxCachedImages)
	hot, _ := filepath.Glob(filepath.Join(dir, "*.pages"))
	for _, path := range hot {
		if _, err := os.Lstat(strings.TrimSuffix(path, ".pages") + ".img"); errors.Is(err, fs.ErrNotExist) {
			os.Remove(path)
		}
	}
}

// pruneFiles removes from dir the files named *ext other than keep that
// nobody has used for imageMaxAge, all but the max used last, and the
// temporary files of writers that died (imageTempPrefix*, *.tmp).
func pruneFiles(dir, keep, ext string, max int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type cached struct {
		path string
		used time.Time
	}
	var files []cached
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), imageTempPrefix) || strings.HasSuffix(e.Name(), ".tmp") {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > tempMaxAge {
				os.Remove(path)
			}
			continue
		}
		if path == keep || filepath.Ext(path) != ext {
			continue
		}
		if info, err := e.Info(); err == nil {
			files = append(files, cached{path, info.ModTime()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.After(files[j].used) })
	for i, f := range files {
		if i >= max-1 || time.Since(f.used) > imageMaxAge {
			os.Remove(f.path)
		}
	}
}

// writeImage stores data at path: whole or not at all, since it is written
// to a temporary file renamed into place. Nothing is synced: after a crash the
// file may hold anything, and loadImage's checksum rejects it.
func writeImage(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Sparse: zero pages (most of the image's free heap) are holes. The
	// first image written under a key stays: a later one is not put in its
	// place (see prepareImage).
	err := atomicfile.WriteFunc(path, func(tmp *os.File) error {
		if err := tmp.Truncate(imageHeaderSize + int64(len(data))); err != nil {
			return err
		}
		if _, err := tmp.WriteAt(imageHeader(data), 0); err != nil {
			return err
		}
		for off := 0; off < len(data); off += WasmPageSize {
			page := data[off:min(off+WasmPageSize, len(data))]
			if isZero(page) {
				continue
			}
			if _, err := tmp.WriteAt(page, imageHeaderSize+int64(off)); err != nil {
				return err
			}
		}
		return nil
	}, atomicfile.Options{Keep: true, Pattern: imageTempPrefix + "*"})
	if errors.Is(err, fs.ErrExist) {
		return nil
	} else if err != nil {
		return err
	}
	pruneImages(filepath.Dir(path), path)
	return nil
}

// startKey is the context key of the start mode experimental.WithStart sets.
type startKey struct{}

// WithStart returns ctx with a start mode for New to use.
func WithStart(ctx context.Context, mode StartMode) context.Context {
	return context.WithValue(ctx, startKey{}, mode)
}

// StartFrom is the start mode ctx carries: StartAuto unless WithStart set one.
func StartFrom(ctx context.Context) StartMode {
	mode, _ := ctx.Value(startKey{}).(StartMode)
	return mode
}
