// Package release publishes the repository's modules as a release would:
// each module of go.work at one version, as the module proxy serves it (a
// directory in the layout of the GOPROXY protocol, which the go command
// reads through GOPROXY=file://DIR). TestRelease installs the command and
// builds the README's program from it (docs/release.md).
package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// A Module is one module of the repository.
type Module struct {
	Path string // its module path
	Dir  string // its folder
	Mod  *modfile.File
}

// Modules returns the modules go.work in root uses.
func Modules(root string) ([]Module, error) {
	raw, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", raw, nil)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, u := range work.Use {
		dir := filepath.Join(root, filepath.FromSlash(u.Path))
		name := filepath.Join(dir, "go.mod")
		raw, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(name, raw, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s has no module line", name)
		}
		mods = append(mods, Module{Path: mf.Module.Mod.Path, Dir: dir, Mod: mf})
	}
	return mods, nil
}

// Publish writes every module of mods at version into the module proxy
// directory proxy: its go.mod, its zip (the files git tracks or would, in
// the working tree, of its folder but its nested modules'), its .info and
// the version in its list. What the zip may hold is the go command's rule
// (golang.org/x/mod/zip), which a real release meets too.
func Publish(mods []Module, version, proxy string) error {
	for _, m := range mods {
		if err := publish(m, mods, version, proxy); err != nil {
			return fmt.Errorf("%s@%s: %w", m.Path, version, err)
		}
	}
	return nil
}

func publish(m Module, mods []Module, version, proxy string) error {
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := moduleFiles(m, mods)
	if err != nil {
		return err
	}
	var z bytes.Buffer
	if err := zip.Create(&z, module.Version{Path: m.Path, Version: version}, files); err != nil {
		return err
	}
	mod, err := os.ReadFile(filepath.Join(m.Dir, "go.mod"))
	if err != nil {
		return err
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, data := range map[string][]byte{
		version + ".mod":  mod,
		version + ".zip":  z.Bytes(),
		version + ".info": info,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintln(list, version)
	return list.Close()
}

// moduleFiles is the files of m a release holds: those git tracks, or
// would (not ignored), under its folder, less the folders of the modules
// nested in it.
func moduleFiles(m Module, mods []Module) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = m.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v\n%s", err, stderr.Bytes())
	}
	var nested []string
	for _, o := range mods {
		if rel, err := filepath.Rel(m.Dir, o.Dir); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			nested = append(nested, filepath.ToSlash(rel)+"/")
		}
	}
	var files []zip.File
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" || slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(name, n) }) {
			continue
		}
		path := filepath.Join(m.Dir, filepath.FromSlash(name))
		fi, err := os.Lstat(path)
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in git
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, file{name: name, path: path, info: fi})
	}
	return files, nil
}

// file is a zip.File on disk.
type file struct {
	name, path string
	info       os.FileInfo
}

func (f file) Path() string                 { return f.name }
func (f file) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.path) }
