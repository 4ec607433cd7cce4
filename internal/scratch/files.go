package scratch

import (
	"slices"
	"strings"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// Place writes a file of the caller's into the working directory before a
// run: name is a slash path relative to it, already checked (clean,
// relative, no ".."); its folders are made as needed. A placed file is not
// the program's until it writes, moves or recreates it (Changed).
func (t *Tree) Place(name string, data []byte) experimentalsys.Errno {
	if len(name) > MaxPath-len(WorkDir)-1 {
		return experimentalsys.ENAMETOOLONG
	}
	dir := t.root.kids[WorkDir]
	parts := strings.Split(name, "/")
	for i, p := range parts {
		if p == "" || p == "." || p == ".." || len(p) > MaxName {
			return experimentalsys.EINVAL
		}
		n := dir.kids[p]
		last := i == len(parts)-1
		switch {
		case n == nil:
			var ok bool
			if n, ok = t.add(dir, p, !last); !ok {
				return experimentalsys.EIO
			}
		case n.dir == last:
			return experimentalsys.EEXIST // a file where a folder must be, or the other way
		}
		n.changed = false
		dir = n
	}
	if int64(len(data)) > t.limits.MaxBytes-t.used {
		return experimentalsys.EIO
	}
	t.setCap(dir, int64(len(data)), int64(len(data)))
	copy(dir.data, data)
	return 0
}

// File is a file the program left in the working directory.
type File struct {
	Name string // slash path relative to the working directory
	Data []byte // its contents (the tree's own bytes: copy before the tree changes)
}

// Changed lists the files under the working directory the program created
// or changed, by name, taking files while they fit in maxFiles and maxBytes
// of contents; skipped is how many more there were.
func (t *Tree) Changed(maxFiles int, maxBytes int64) (files []File, skipped int) {
	work := t.root.kids[WorkDir]
	if work == nil || !work.dir {
		return nil, 0
	}
	var total int64
	var walk func(prefix string, d *node)
	walk = func(prefix string, d *node) {
		names := make([]string, 0, len(d.kids))
		for name := range d.kids {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			n := d.kids[name]
			switch {
			case n.dir:
				walk(prefix+name+"/", n)
			case !n.changed:
			case len(files) < maxFiles && total+int64(len(n.data)) <= maxBytes:
				files = append(files, File{Name: prefix + name, Data: n.data})
				total += int64(len(n.data))
			default:
				skipped++
			}
		}
	}
	walk("", work)
	return files, skipped
}
