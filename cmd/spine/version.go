package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spine-run/spine/guest"
)

const versionUsage = `usage: spine version

Prints the version of Spine (the module's, "(devel)" when built from a
checkout), the embedded Guest build (the first 12 hex digits of the SHA-256
of its manifest, which records the hash of every input and output of the
build; the build is reproducible, so it records no date) with the hashes of
its files, the CPython version inside it, and the Go that built spine.
spine --version prints the same.

exit codes: 0 ok, 2 usage error
`

// versionCommand is spine version (and spine --version).
func versionCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine version", flag.ContinueOnError)
	if _, code, done := parseFlags(fs, args, versionUsage, 0, stdout, stderr); done {
		return code
	}
	fmt.Fprint(stdout, versionText())
	return exitOK
}

// versionText is what spine version prints.
func versionText() string {
	module := moduleVersion()
	g := guestBuild(guest.Manifest)
	return fmt.Sprintf("spine %s\nguest %s (spine.wasm %s, python311.zip %s, abi %d)\nCPython %s (wasm32-wasi)\n%s %s/%s\n",
		module, g.id, short(g.Artifact["spine.wasm"]), short(g.Artifact["python311.zip"]), g.ABI,
		g.CPython.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// moduleVersion is the version of the spine module built in: "(devel)" from
// a checkout, "(unknown)" without build information.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(unknown)"
}

// build is what spine version reads of the Guest's manifest.
type build struct {
	id       string
	ABI      int               `json:"abi_version"`
	Artifact map[string]string `json:"artifact"` // file name → SHA-256
	CPython  struct {
		Version string `json:"version"`
	} `json:"cpython"`
}

func guestBuild(manifest []byte) build {
	var b build
	if err := json.Unmarshal(manifest, &b); err != nil || b.CPython.Version == "" {
		b.CPython.Version = "(unknown)"
	}
	sum := sha256.Sum256(manifest)
	b.id = hex.EncodeToString(sum[:6])
	return b
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	if hash == "" {
		return "(unknown)"
	}
	return hash
}
