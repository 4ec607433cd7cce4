package spine

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/warmup"
)

// The bounds on Options.Packages: the tree is read whole into the Host's
// memory once, by New, and mounted read-only in every Guest.
const (
	maxPackagesBytes = 256 << 20 // the files' bytes, all together
	maxPackagesFiles = 100_000
	maxPackagePath   = 1024 // bytes of one file's path in the tree
	maxPreload       = 256  // names in Options.Preload and Artifact.Preload together
	maxPreloadName   = 200  // bytes of one name
)

// extensionSuffixes are the files of compiled extension modules: the Guest
// cannot load any (WASI has no dynamic linking).
var extensionSuffixes = []string{".so", ".pyd", ".dylib", ".wasm"}

// ErrPackages wraps every problem New finds with Options.Packages or a
// Preload name.
var ErrPackages = errors.New("spine: packages")

// packPackages packs the tree fsys into a zip archive the Guest's zipimport
// reads: every regular file but __pycache__ folders and .pyc files (the
// Guest compiles what it imports from the sources, and bytecode of another
// Python version would be refused anyway), in lexical order, stored, with a
// fixed time, so the same tree gives the same bytes. A file of a compiled
// extension module refuses the whole tree, naming every one of them.
func packPackages(fsys fs.FS) ([]byte, error) {
	type file struct {
		name string
		data []byte
	}
	var files []file
	var compiled []string
	var total int64
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if len(name) > maxPackagePath {
			return fmt.Errorf("%s...: path longer than %d bytes", name[:64], maxPackagePath)
		}
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".pyc") {
			return nil
		}
		for _, suffix := range extensionSuffixes {
			if strings.HasSuffix(strings.ToLower(name), suffix) {
				compiled = append(compiled, name)
				return nil
			}
		}
		from := name
		if !d.Type().IsRegular() {
			if from, err = linkedFile(fsys, name, d.Type()); err != nil {
				return err
			}
		}
		if len(files) >= maxPackagesFiles {
			return fmt.Errorf("more than %d files", maxPackagesFiles)
		}
		data, err := readBounded(fsys, from, maxPackagesBytes-total)
		if err != nil {
			return err
		}
		total += int64(len(data))
		files = append(files, file{name, data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPackages, err)
	}
	if len(compiled) > 0 {
		return nil, fmt.Errorf("%w: compiled extension modules cannot be loaded by the Guest (only pure-Python packages can): %s",
			ErrPackages, strings.Join(compiled, ", "))
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	when := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range files {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Store, Modified: when})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPackages, err)
		}
		if _, err := fw.Write(f.data); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPackages, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPackages, err)
	}
	return buf.Bytes(), nil
}

// maxLinkHops bounds the symbolic links followed for one name (Linux's own
// bound).
const maxLinkHops = 40

// linkedFile returns the name in fsys of the regular file that the entry
// name, of type typ and not a regular file itself, stands for. A symbolic
// link is followed only while it stays inside the tree: os.DirFS would follow
// an absolute link, or one that climbs out, anywhere on the Host (a link to
// /proc/self/environ would hand a program the Host's environment). A link to
// a folder, a device, a named pipe, a socket, or a link the tree cannot read
// is refused, each with an error naming the entry.
func linkedFile(fsys fs.FS, name string, typ fs.FileMode) (string, error) {
	if typ&fs.ModeSymlink == 0 {
		return "", fmt.Errorf("%s: %s: only files, folders and links to files inside the tree are packed", name, fileKind(typ))
	}
	rl, ok := fsys.(fs.ReadLinkFS)
	if !ok {
		return "", fmt.Errorf("%s: a symbolic link in a tree that cannot say where its links lead (no fs.ReadLinkFS)", name)
	}
	target, err := resolveInside(rl, name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	info, err := rl.Lstat(target)
	if err != nil {
		return "", err
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s: a symbolic link to %s, %s: only links to files are followed", name, target, fileKind(info.Mode().Type()))
	}
	return target, nil
}

// resolveInside follows the symbolic links on the way to name in fsys, a
// component at a time as the kernel does, and returns the path they lead to,
// which holds no link. A link that is absolute or climbs above the tree's root
// is refused.
func resolveInside(fsys fs.ReadLinkFS, name string) (string, error) {
	var done []string // resolved components, none a link
	rest := strings.Split(name, "/")
	last := "" // the target of the last link followed
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("a symbolic link to %s, which leads out of the package folder", last)
			}
			done = done[:len(done)-1]
			continue
		}
		p := path.Join(append(done, c)...)
		info, err := fsys.Lstat(p)
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", fmt.Errorf("more than %d symbolic links on the way", maxLinkHops)
		}
		target, err := fsys.ReadLink(p)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) || filepath.IsAbs(target) || filepath.VolumeName(target) != "" {
			return "", fmt.Errorf("a symbolic link to %s, outside the package folder", target)
		}
		last = target
		rest = append(strings.Split(target, "/"), rest...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// fileKind names the type of a file that is not a regular file.
func fileKind(typ fs.FileMode) string {
	switch {
	case typ&fs.ModeDir != 0:
		return "a folder"
	case typ&fs.ModeCharDevice != 0:
		return "a character device"
	case typ&fs.ModeDevice != 0:
		return "a device"
	case typ&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case typ&fs.ModeSocket != 0:
		return "a socket"
	case typ&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return fmt.Sprintf("a special file (%v)", typ)
}

// readBounded reads the file name of fsys, failing when it holds more than
// limit bytes or is not a regular file once open.
func readBounded(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s, not a file", name, fileKind(info.Mode().Type()))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("the files hold more than %d bytes (at %s)", maxPackagesBytes, name)
	}
	return data, nil
}

var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// checkPreload checks the names of modules to import into the image: dotted
// Python identifiers, a bounded number of bounded length. It returns them
// without repeats, in their first order.
func checkPreload(names []string) ([]string, error) {
	if len(names) > maxPreload {
		return nil, fmt.Errorf("%w: %d modules to preload, at most %d", ErrPackages, len(names), maxPreload)
	}
	seen := make(map[string]bool, len(names))
	var out []string
	for _, n := range names {
		if len(n) > maxPreloadName || !moduleName.MatchString(n) {
			if len(n) > 64 {
				n = n[:64] + "..."
			}
			return nil, fmt.Errorf("%w: preload %q is not a module name", ErrPackages, n)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// world is what a Runner adds to the Guest beyond its artifact: the archives
// mounted beside the standard library and the warm-up that puts them on
// sys.path and imports the modules to preload.
type world struct {
	files    []guest.File   // beside python311.zip
	warm     string         // the whole warm-up
	digest   []byte         // identifies files and warm, for the image key
	preloads map[int]string // the module each preload's import line of warm imports
}

// newWorld puts together the world of artifact a and options opts; site is
// Options.Packages packed (nil when unset).
func newWorld(a Artifact, site []byte, preload []string) world {
	var w world
	var paths []string
	if len(a.PackagesZip) > 0 {
		w.files = append(w.files, guest.File{Name: warmup.DataZip, Data: a.PackagesZip})
		paths = append(paths, warmup.DataZip)
	}
	if site != nil {
		w.files = append(w.files, guest.File{Name: warmup.SiteZip, Data: site})
		paths = append(paths, warmup.SiteZip)
	}
	w.warm, w.preloads = warmup.With(paths, preload)
	h := sha256.New()
	for _, f := range w.files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s:%x\n", f.Name, sum)
	}
	fmt.Fprintf(h, "%d:%s", len(w.warm), w.warm)
	w.digest = h.Sum(nil)
	return w
}

// preloadError is a module to preload that failed to import in the warm-up:
// it names the module and the exception, and is an ErrPackages.
type preloadError struct {
	module, typ, message string
}

func (e *preloadError) Error() string {
	return fmt.Sprintf("%v: preload %s: %s: %s", ErrPackages, e.module, e.typ, e.message)
}

func (e *preloadError) Is(target error) bool { return target == ErrPackages }
