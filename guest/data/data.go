// Package data is Spine's data Guest: the default Guest's CPython 3.11.2 with numpy
// 1.24.2 linked in (every runtime C module: numpy.core, numpy.random, numpy.linalg on
// lapack_lite, numpy.fft), pandas 1.5.3 (every runtime C and Cython module) with
// python-dateutil and pytz, sympy 1.11.1 and mpmath 1.2.1, and PyYAML 6.0, for programs
// that compute.
// It lives in a Go module of its own so that the core module's download does not
// carry it; a Runner opts in with
//
//	spine.New(ctx, manifest, &spine.Options{Artifact: data.Artifact()})
//
// and the CLI with spine run --guest data. guest/data/build.sh builds it from pinned
// sources (docs/packages.md says what differs from native numpy: the default integer is
// 32 bits, and there are no floating-point exception flags).
package data

import (
	_ "embed"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
)

// Wasm is the stripped data Guest module.
//
//go:embed artifact/spine.wasm
var Wasm []byte

// PackagesZip holds numpy's, pandas', dateutil's, pytz's, six's, sympy's, mpmath's
// and PyYAML's Python as precompiled .pyc.
//
//go:embed artifact/packages.zip
var PackagesZip []byte

// Manifest is the JSON record of the build's inputs and outputs.
//
//go:embed artifact/manifest.json
var Manifest []byte

// Preload is what the data Guest's image imports: first _spine_builtins,
// the finder of numpy's and pandas' built-in C modules (without it neither
// can be imported), then, so that runs do not pay for them, numpy with its
// random, linalg and fft parts (about 0.1–0.4 s a run otherwise, on the loaded
// machine of docs/packages.md), sympy (about 1 s) and pandas (about 0.9 s).
// The image's heap grows from 21 to 67 MiB, but its pages are shared
// copy-on-write by every warm Guest: a pool's memory did not grow.
var Preload = []string{"_spine_builtins", "numpy", "numpy.random", "numpy.linalg", "numpy.fft", "sympy", "pandas"}

// Artifact returns the data Guest for spine.Options.Artifact: this module's
// wasm and packages with the default Guest's standard library, which it
// shares. Each call returns a new Artifact over the same bytes.
func Artifact() *spine.Artifact {
	return &spine.Artifact{
		Wasm:        Wasm,
		StdlibZip:   guest.StdlibZip,
		PackagesZip: PackagesZip,
		Preload:     append([]string(nil), Preload...),
	}
}
