package spine

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/scratch"
)

// A File is a file of a run's working directory: one the caller places there
// before the run (Request.Files) or one the program created or changed
// (Output.Files).
type File struct {
	// Name is the file's path relative to the working directory, with
	// slashes: "data.csv", "out/chart.svg". Request.Files names must be
	// clean, relative and within the limits of CheckFiles.
	Name string `json:"name"`

	// Data is the file's contents.
	Data []byte `json:"data"`
}

// Limits of a File's name (bytes): a whole name, and each of its parts.
const (
	MaxFileName     = 1024
	MaxFileNamePart = scratch.MaxName
)

// CheckFiles validates files as Run does before the run: at most
// Options.MaxFiles of them, MaxFileBytes of contents in all, and room for
// them in the scratch file system; names relative ("a/b.csv", never
// "/etc/passwd"), clean (no "." or ".." parts, no empty part, no trailing
// slash), valid UTF-8 without control characters or backslashes, at most
// MaxFileName bytes and MaxFileNamePart per part, each named once, and no
// file inside another ("a" and "a/b"). The error matches ErrBadRequest or
// ErrTooLarge. The CLI, the service and the MCP server call it to refuse a
// bad request before they take a slot for it.
func (r *Runner) CheckFiles(files []File) error {
	if len(files) > r.opts.MaxFiles {
		return fmt.Errorf("%w: %d files, over the limit of %d", ErrTooLarge, len(files), r.opts.MaxFiles)
	}
	var total int64
	names := make(map[string]bool, len(files))
	dirs := map[string]bool{}
	for _, f := range files {
		if err := checkFileName(f.Name); err != nil {
			return err
		}
		if names[f.Name] {
			return fmt.Errorf("%w: file %q is given twice", ErrBadRequest, f.Name)
		}
		if dirs[f.Name] {
			return fmt.Errorf("%w: file %q is also a folder of another file", ErrBadRequest, f.Name)
		}
		names[f.Name] = true
		for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
			if names[dir] {
				return fmt.Errorf("%w: file %q is also a folder of another file", ErrBadRequest, dir)
			}
			dirs[dir] = true
		}
		total += int64(len(f.Data))
	}
	if total > int64(r.opts.MaxFileBytes) {
		return fmt.Errorf("%w: files hold %d bytes, over the %d-byte limit", ErrTooLarge, total, r.opts.MaxFileBytes)
	}
	entries := len(names) + len(dirs)
	if need := total + int64(entries)*scratch.EntryOverhead; entries > r.opts.MaxScratchEntries || need > r.opts.ScratchSize {
		return fmt.Errorf("%w: files need %d bytes and %d entries of the scratch file system, which holds %d and %d",
			ErrTooLarge, need, entries, r.opts.ScratchSize, r.opts.MaxScratchEntries)
	}
	return nil
}

// CheckFileName validates one file name as CheckFiles does. Output.Files
// names are the program's: a caller writing them to its own file system
// checks them with it first.
func CheckFileName(name string) error { return checkFileName(name) }

// checkFileName validates one Request.Files name (CheckFiles).
func checkFileName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: file name %q %s", ErrBadRequest, clip(name), why)
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: a file has no name", ErrBadRequest)
	case len(name) > MaxFileName:
		return bad(fmt.Sprintf("is %d bytes, over the limit of %d", len(name), MaxFileName))
	case !utf8.ValidString(name):
		return bad("is not UTF-8")
	case strings.HasPrefix(name, "/"):
		return bad("is absolute: names are relative to the working directory")
	case strings.ContainsAny(name, "\\"):
		return bad("holds a backslash: parts are separated by slashes")
	case strings.IndexFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0:
		return bad("holds a control character")
	}
	for _, part := range strings.Split(name, "/") {
		switch {
		case part == "":
			return bad("has an empty part")
		case part == "." || part == "..":
			return bad("is not clean: no . or .. parts")
		case len(part) > MaxFileNamePart:
			return bad(fmt.Sprintf("has a part of %d bytes, over the limit of %d", len(part), MaxFileNamePart))
		}
	}
	return nil
}

// clip shortens a name quoted in an error.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// placeFiles writes a request's files (checked by CheckFiles) into the run's
// working directory.
func placeFiles(inst *engine.Instance, files []File) error {
	tree := inst.Scratch()
	for _, f := range files {
		if errno := tree.Place(f.Name, f.Data); errno != 0 {
			return fmt.Errorf("%w: file %q does not fit in the scratch file system", ErrTooLarge, clip(f.Name))
		}
	}
	return nil
}

// outputFiles is what the run left in inst's working directory, within the
// caps of opts (MaxFiles, MaxFileBytes), and how many changed files those
// leave out.
func outputFiles(inst *engine.Instance, opts *Options) ([]File, int) {
	tree := inst.Scratch()
	if tree == nil {
		return nil, 0
	}
	changed, skipped := tree.Changed(opts.MaxFiles, int64(opts.MaxFileBytes))
	if len(changed) == 0 {
		return nil, skipped
	}
	files := make([]File, len(changed))
	for i, f := range changed {
		// The tree is dropped after the run and its arrays never written
		// again: the Output may keep them.
		data := f.Data[:len(f.Data):len(f.Data)]
		if data == nil {
			data = []byte{}
		}
		files[i] = File{Name: f.Name, Data: data}
	}
	return files, skipped
}
