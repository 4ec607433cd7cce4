package engine

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine/internal/atomicfile"
	"github.com/tetratelabs/wazero"
)

// The compiled Guest is cached on disk by wazero, and wazero (v1.12.0) does
// not protect itself from a damaged cache entry. It checks a CRC-32C of the
// entry's machine code, but a mismatch is an error of CompileModule that
// leaves the entry in place, so every later New fails with ErrArtifact until
// someone deletes the folder; and nothing checks the function offsets stored
// beside the code, so one changed byte there crashes the process (a Go panic,
// or a segmentation fault in the machine code) as the module is loaded or run.
//
// So each Guest module compiles into a folder of its own, code/<id> under the
// cache folder, that holds nothing else. After a compile, sealCodeCache
// records the size and CRC-32C of every entry it finds there without a record
// (<entry>.sum beside it). Before the next compile, openCodeCache removes
// every entry whose record is missing or does not match, and wazero compiles
// it afresh: a damaged entry costs one compile, never a failure. Checking the
// Guest's 16 MiB entry takes 3-4 ms when the file is in the page cache.

// sumSuffix ends the name of an entry's record; wazero's own files are named
// by a hex key, or end in ".tmp" while it writes them.
const sumSuffix = ".sum"

// openCodeCache returns wazero's compilation cache for module, its damaged
// entries removed, and the cache folder prepared images go under ("" when
// compiled code is cached in memory only). After compiling module, call
// sealCodeCache.
func openCodeCache(noDisk bool, dir string, module []byte) (wazero.CompilationCache, string, error) {
	if dir = cacheFolder(noDisk, dir); dir == "" {
		return wazero.NewCompilationCache(), "", nil
	}
	folder := codeFolder(dir, module)
	checkCodeCache(folder)
	cache, err := wazero.NewCompilationCacheWithDir(folder)
	if err != nil {
		return nil, "", fmt.Errorf("spine: compilation cache: %w", err)
	}
	return cache, dir, nil
}

// cacheFolder is the cache folder: dir, or the user's when dir is "", or ""
// for none (noDisk, or no home).
func cacheFolder(noDisk bool, dir string) string {
	switch {
	case noDisk:
		return ""
	case dir != "":
		return dir
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "spine")
}

// codeFolder is module's folder under the cache folder dir: named by the
// module's CRC-32C and length, and the version of wazero, so that it normally
// holds a single entry.
func codeFolder(dir string, module []byte) string {
	id := moduleID(module) + "-" + wazeroVersion()
	return filepath.Join(dir, "code", id)
}

// wazeroVersion is the version of wazero built in, "dev" when unknown.
var wazeroVersion = sync.OnceValue(func() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/tetratelabs/wazero" && dep.Version != "" && dep.Version != "(devel)" {
				return dep.Version
			}
		}
	}
	return "dev"
})

// codeEntries calls f with the path of every file in the entry folders wazero
// makes under folder (one for each wazero version, architecture and system).
func codeEntries(folder string, f func(path string, info os.FileInfo)) {
	subs, _ := filepath.Glob(filepath.Join(folder, "wazero-*"))
	for _, sub := range subs {
		files, err := os.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, file := range files {
			path := filepath.Join(sub, file.Name())
			// os.Stat, not the entry's own: a seeded entry is a link
			// (seedCacheFolder).
			if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() {
				f(path, info)
			}
		}
	}
}

// checkCodeCache removes from module's folder the entries that have no
// record or do not match it, the records left without an entry, and the
// temporary files of writers that died.
func checkCodeCache(folder string) {
	codeEntries(folder, func(path string, info os.FileInfo) {
		switch {
		case strings.HasSuffix(path, ".tmp"):
			if time.Since(info.ModTime()) > tempMaxAge {
				os.Remove(path)
			}
		case strings.HasSuffix(path, sumSuffix):
			if _, err := os.Lstat(strings.TrimSuffix(path, sumSuffix)); errors.Is(err, os.ErrNotExist) {
				os.Remove(path)
			}
		default:
			if err := checkCodeEntry(path); err != nil {
				os.Remove(path)
				os.Remove(path + sumSuffix)
			}
		}
	})
}

// checkCodeEntry reports whether the entry at path is the one its record
// describes.
func checkCodeEntry(path string) error {
	record, err := os.ReadFile(path + sumSuffix)
	if err != nil {
		return err
	}
	size, sum, err := entrySum(path)
	if err != nil {
		return err
	}
	if string(record) != formatSum(size, sum) {
		return errors.New("does not match its record")
	}
	return nil
}

// sealCodeCache records the size and CRC-32C of every entry without a record
// in module's folder under the cache folder dir: the entries the compile
// wrote. dir is openCodeCache's; "" does nothing.
func sealCodeCache(dir string, module []byte) {
	if dir == "" {
		return
	}
	codeEntries(codeFolder(dir, module), func(path string, _ os.FileInfo) {
		if strings.HasSuffix(path, ".tmp") || strings.HasSuffix(path, sumSuffix) {
			return
		}
		if _, err := os.Lstat(path + sumSuffix); !errors.Is(err, os.ErrNotExist) {
			return
		}
		size, sum, err := entrySum(path)
		if err != nil {
			return
		}
		atomicfile.Write(path+sumSuffix, []byte(formatSum(size, sum)), atomicfile.Options{})
	})
}

func formatSum(size int64, sum uint32) string {
	return fmt.Sprintf("crc32c %08x size %d\n", sum, size)
}

// entrySum returns the size and CRC-32C of the file at path.
func entrySum(path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(h, f, make([]byte, 1<<20))
	if err != nil {
		return 0, 0, err
	}
	return n, h.Sum32(), nil
}
