// Package warmup is the program the Guest the image is taken from runs once,
// and what a world of packages adds to it: the Runner's (package spine) and
// the wasmtime module's Engine, which takes the same image.
package warmup

import (
	"fmt"
	"path"
	"strings"

	"github.com/spine-run/spine/guest"
)

// Source imports the modules programs use most (asyncio, concurrent.futures
// and zoneinfo among them: their import would cost a run up to hundreds of
// milliseconds, docs/python.md), runs the early-read pass once so CPython's
// specialized bytecode for it is in the image, makes os.chdir keep the
// working directory's name normal (wasi-libc, which keeps it, joins a
// relative path to it as given, so that os.getcwd() would answer
// "/work/a/.."; without links in the scratch tree, normpath is exact), then
// freezes everything alive so the collector of a run never walks (and so
// never dirties) the image's objects. Last, it lists the random generators
// alive in the image, which every run reseeds from its own entropy
// (world.find_generators): the image is captured with fixed randomness.
const Source = `import json, re, math, datetime, collections, itertools, functools, ast
import asyncio, concurrent.futures.thread, zoneinfo, tzdata
asyncio.run(asyncio.sleep(0))
import plm
plm.warm()
import os, posixpath
def chdir(path, _chdir=os.chdir):
    """Change the current working directory to the specified path."""
    if isinstance(path, int):
        return _chdir(path)
    path = os.fspath(path)
    cwd = os.getcwdb() if isinstance(path, bytes) else os.getcwd()
    return _chdir(posixpath.normpath(posixpath.join(cwd, path)))
os.chdir = chdir
del chdir
import gc
gc.collect()
import world
world.find_generators()
gc.freeze()
`

// The archives beside python311.zip in the Guest's library folder
// (guest.StdlibMount), on sys.path after it in the order With is given them.
const (
	DataZip = "data.zip" // an Artifact's PackagesZip: the data Guest's packages
	SiteZip = "site.zip" // Options.Packages, packed by New
)

// With is Source with archives (names in the library folder) appended to
// sys.path and the modules of preload imported, before the collector freezes
// the image; lines maps the line of each preload's import to its module.
func With(archives, preload []string) (source string, lines map[int]string) {
	if len(archives) == 0 && len(preload) == 0 {
		return Source, nil
	}
	var b strings.Builder
	b.WriteString("import sys\n")
	for _, p := range archives {
		fmt.Fprintf(&b, "sys.path.append(%q)\n", path.Join(guest.StdlibMount, p))
	}
	i := strings.Index(Source, "import gc\n")
	line := strings.Count(Source[:i], "\n") + 1 + len(archives) + 1
	lines = make(map[int]string, len(preload))
	for _, m := range preload {
		fmt.Fprintf(&b, "import %s\n", m)
		lines[line] = m
		line++
	}
	return Source[:i] + b.String() + Source[i:], lines
}
