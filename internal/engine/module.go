package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/spine-run/spine/internal/atomicfile"
	"github.com/spine-run/spine/internal/wasm"
)

// The module the Host compiles is not the artifact's: its data segments are
// split off (wasm.SplitData) and it is instrumented (wasm.Instrument). Both
// read and copy the whole 7 MiB module, about a quarter of a new process's
// New with warm caches, for the same answer every time. So that answer is
// cached too, in modules/<key>.mod under the cache folder, the key naming
// the artifact, wasm.Version and the version of wazero; a New that finds it
// maps it read-only and hands it to wazero without copying it (wazero copies
// what it keeps of a module while decoding it). The data segments are not
// stored: only a Guest started from scratch needs them, and then
// wasm.DataSegments reads them from the artifact.
//
// A module file is a header of moduleHeaderSize bytes, then the module:
//
//	offset  0  moduleMagic, 12 bytes
//	offset 12  moduleFileVersion, uint32 little-endian
//	offset 16  flags, uint32 little-endian: moduleInstrumented or 0
//	offset 20  the module's length in bytes, uint32 little-endian
//	offset 24  CRC-32C of the whole file, these four bytes counted as zero, uint32 little-endian
//	offset 28  zeros up to moduleHeaderSize
//
// As with images, the checksum catches a torn write, a truncated file or
// flipped bits; a file that fails it is removed and made again.
const (
	moduleMagic        = "spine module"
	moduleFileVersion  = 1
	moduleHeaderSize   = 64
	moduleInstrumented = 1

	// maxModuleSize bounds the module a file may claim to hold; the
	// Guest's is about 8 MiB.
	maxModuleSize = 1 << 30

	// maxCachedModules is how many module files the cache keeps at most
	// (the ones used last); one unused for imageMaxAge goes too.
	maxCachedModules = 4
)

// guestModule is the module the Host compiles.
type guestModule struct {
	code         []byte
	instrumented bool
	cached       bool   // code is from the cache folder
	release      func() // frees code when it is mapped; nil otherwise
}

func (m *guestModule) close() {
	if m.release != nil {
		m.release()
		m.release = nil
	}
	m.code = nil
}

// moduleKey names the cached module of the artifact identified by id.
// A module made while wasm.OmitTicksForMeasurement is set has no tick
// checks, so it is kept under a key of its own.
func moduleKey(id string) string {
	key := fmt.Sprintf("%s-w%d-%s", id, wasm.Version, wazeroVersion())
	if wasm.OmitTicksForMeasurement.Load() {
		key += "-noticks"
	}
	return key
}

// moduleID names a module by its CRC-32C and length, as its folder of
// compiled code is named.
func moduleID(module []byte) string {
	return fmt.Sprintf("%08x-%d", crc32.Checksum(module, castagnoli), len(module))
}

// artifactID is cfg.ArtifactID, or the hash of the artifact's module.
func artifactID(cfg *Config) string {
	if cfg.ArtifactID != "" {
		return cfg.ArtifactID
	}
	sum := sha256.Sum256(cfg.Wasm)
	return hex.EncodeToString(sum[:])
}

// modulePath is where the cache folder dir keeps the module made from the
// artifact cfg names; "" without a cache folder.
func modulePath(dir string, cfg *Config) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "modules", moduleKey(artifactID(cfg))+".mod")
}

// makeModule splits and instruments the artifact's module. An artifact that
// cannot be instrumented is compiled as it is, without its data segments
// (wazero's own, slower, way to stop it then; no reuse of Guests).
func makeModule(artifact []byte) (guestModule, []wasm.DataSegment, error) {
	stripped, segments, err := wasm.SplitData(artifact)
	if err != nil {
		return guestModule{}, nil, fmt.Errorf("%w: %v", ErrArtifact, err)
	}
	if module, err := wasm.Instrument(stripped); err == nil {
		return guestModule{code: module, instrumented: true}, segments, nil
	}
	return guestModule{code: stripped}, segments, nil
}

// prepareModule returns the module to compile: from the file at path when
// it holds an intact one, else made from the artifact and stored at path.
// The data segments are returned only when the module was made here (nil
// from the cache).
func prepareModule(path string, artifact []byte) (guestModule, []wasm.DataSegment, error) {
	if m, err := loadModule(path); err == nil {
		return m, nil, nil
	}
	m, segments, err := makeModule(artifact)
	if err != nil {
		return guestModule{}, nil, err
	}
	if path != "" {
		// A cache: failing to write it costs only time.
		if writeModule(path, m) == nil {
			pruneFiles(filepath.Dir(path), path, ".mod", maxCachedModules)
		}
	}
	return m, segments, nil
}

// moduleHeader returns the header of a module file holding m.
func moduleHeader(m guestModule) []byte {
	h := make([]byte, moduleHeaderSize)
	copy(h, moduleMagic)
	binary.LittleEndian.PutUint32(h[12:], moduleFileVersion)
	if m.instrumented {
		binary.LittleEndian.PutUint32(h[16:], moduleInstrumented)
	}
	binary.LittleEndian.PutUint32(h[20:], uint32(len(m.code)))
	binary.LittleEndian.PutUint32(h[24:], crc32.Update(crc32.Checksum(h, castagnoli), castagnoli, m.code))
	return h
}

// writeModule stores m at path, whole or not at all.
func writeModule(path string, m guestModule) error {
	if len(m.code) > maxModuleSize {
		return errors.New("module too large to cache")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(moduleHeader(m), m.code...), atomicfile.Options{})
}

// decodeModuleFile returns the module a module file's bytes hold, and
// whether it is instrumented; an error when they are not a whole, intact
// module file of this format. The module is a slice of file.
func decodeModuleFile(file []byte) (module []byte, instrumented bool, err error) {
	if len(file) < moduleHeaderSize {
		return nil, false, errors.New("no header")
	}
	h := file[:moduleHeaderSize]
	if string(h[:len(moduleMagic)]) != moduleMagic || binary.LittleEndian.Uint32(h[12:]) != moduleFileVersion {
		return nil, false, errors.New("not a module file of this format")
	}
	flags := binary.LittleEndian.Uint32(h[16:])
	if flags&^moduleInstrumented != 0 {
		return nil, false, fmt.Errorf("unknown flags %#x", flags)
	}
	n := uint64(binary.LittleEndian.Uint32(h[20:]))
	if n == 0 || n > maxModuleSize || uint64(len(file)) != moduleHeaderSize+n {
		return nil, false, fmt.Errorf("%d bytes for a module of %d", len(file), n)
	}
	if !isZero(h[28:]) {
		return nil, false, errors.New("header padding is not zero")
	}
	var blank [4]byte
	sum := crc32.Update(0, castagnoli, h[:24])
	sum = crc32.Update(sum, castagnoli, blank[:])
	sum = crc32.Update(sum, castagnoli, h[28:])
	sum = crc32.Update(sum, castagnoli, file[moduleHeaderSize:])
	if sum != binary.LittleEndian.Uint32(h[24:]) {
		return nil, false, errors.New("checksum mismatch")
	}
	return file[moduleHeaderSize:], flags&moduleInstrumented != 0, nil
}

// loadModule returns the module cached at path, mapped where the platform
// allows it. A file that is not a whole, intact module file is removed and
// reported as an error, so that the caller makes the module anew.
func loadModule(path string) (guestModule, error) {
	if path == "" {
		return guestModule{}, errors.New("no module cache")
	}
	f, err := os.Open(path)
	if err != nil {
		return guestModule{}, err
	}
	defer f.Close()
	m, err := loadModuleFile(f)
	if err != nil {
		removeIfSame(f, path)
		return guestModule{}, fmt.Errorf("cached module %s: %w", path, err)
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // in use: see pruneFiles
	return m, nil
}

func loadModuleFile(f *os.File) (guestModule, error) {
	info, err := f.Stat()
	if err != nil {
		return guestModule{}, err
	}
	size := info.Size()
	if size < moduleHeaderSize || size > moduleHeaderSize+maxModuleSize {
		return guestModule{}, fmt.Errorf("%d bytes", size)
	}
	file, release, err := mapFile(f, int(size))
	if err != nil {
		return guestModule{}, err
	}
	code, instrumented, err := decodeModuleFile(file)
	if err != nil {
		release()
		return guestModule{}, err
	}
	return guestModule{code: code, instrumented: instrumented, cached: true, release: release}, nil
}

// removeIfSame removes path if it still names the file f: another process
// may have just replaced a bad file with a good one.
func removeIfSame(f *os.File, path string) {
	if opened, err := f.Stat(); err == nil {
		if now, err := os.Lstat(path); err == nil && os.SameFile(opened, now) {
			os.Remove(path)
		}
	}
}
