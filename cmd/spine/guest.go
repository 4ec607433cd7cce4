package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/guest/data"
)

// guestUsage is the help of guestOptions' flags, for spine serve, mcp and
// warm (spine run words them its own way).
const guestUsage = `  --guest data|DIR         the Guest runs are on: the data Guest (numpy, pandas, sympy:
                           docs/packages.md), or a folder holding a Guest build's spine.wasm
  --packages DIR           the programs' own pure-Python packages, as site-packages holds them
  --preload a,b            modules the image runs start from imports, once
`

// guestOptions are the flags that choose the Guest and what it imports:
// --guest, --packages and --preload.
type guestOptions struct {
	guest    string // "", "default", "data" or a folder
	packages string // a folder of pure-Python packages
	preload  string // module names, comma-separated
}

func (o *guestOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.guest, "guest", "", "")
	fs.StringVar(&o.packages, "packages", "", "")
	fs.StringVar(&o.preload, "preload", "", "")
}

// apply sets opts' Artifact, Packages and Preload from the flags.
func (o *guestOptions) apply(opts *spine.Options) error {
	switch o.guest {
	case "", "default":
	case "data":
		opts.Artifact = data.Artifact()
	default:
		a, err := loadGuestFolder(o.guest)
		if err != nil {
			return err
		}
		opts.Artifact = a
	}
	if o.packages != "" {
		info, err := os.Stat(o.packages)
		if err != nil {
			return fmt.Errorf("--packages: %w", err)
		}
		if !info.IsDir() {
			return fmt.Errorf("--packages: %s is not a folder", o.packages)
		}
		opts.Packages = os.DirFS(o.packages)
	}
	if o.preload != "" {
		for _, name := range strings.Split(o.preload, ",") {
			if name = strings.TrimSpace(name); name != "" {
				opts.Preload = append(opts.Preload, name)
			}
		}
	}
	return nil
}

// loadGuestFolder reads a Guest build from dir: spine.wasm, and python311.zip
// and packages.zip when it has them (the default Guest's standard library
// otherwise).
func loadGuestFolder(dir string) (*spine.Artifact, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--guest: %w (want data, default or a folder)", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("--guest: %s is not a folder holding spine.wasm", dir)
	}
	a := &spine.Artifact{StdlibZip: guest.StdlibZip}
	for _, f := range []struct {
		name     string
		into     *[]byte
		optional bool
	}{{"spine.wasm", &a.Wasm, false}, {guest.StdlibZipName, &a.StdlibZip, true}, {"packages.zip", &a.PackagesZip, true}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if f.optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("--guest: %w", err)
		}
		*f.into = b
	}
	return a, nil
}
