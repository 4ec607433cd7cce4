// Package image builds Spine's container image without a container daemon:
// the static spine binary, CA certificates, a compilation cache filled for
// the image's CPU architecture (spine warm), an unprivileged user and no
// shell, written as an OCI image layout and a tarball that docker load and
// podman load take (docs/deploy.md).
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image, and who runs it.
const (
	Binary   = "/usr/local/bin/spine"
	CACerts  = "/etc/ssl/certs/ca-certificates.crt"
	SeedDir  = "/usr/lib/spine/cache" // the cache spine warm filled: read-only, copied into CacheDir
	CacheDir = "/var/cache/spine"     // the writable cache: an emptyDir or a tmpfs when the root is read-only
	UID      = 65532
	User     = "65532:65532"
	Port     = 8080
)

// Options say what to build the image from.
type Options struct {
	// Source is the repository's folder (the one with go.work).
	Source string
	// Arch is the image's CPU architecture, as GOARCH; default this one's.
	// The cache can be filled only for this machine's architecture: for
	// another, NoCache must be set.
	Arch string
	// NoCache leaves the compilation cache out: every replica then compiles
	// the Guest when it starts.
	NoCache bool
	// Guests are the Guests whose compiled code the cache holds besides the
	// default Guest's, by spine warm's --guest ("data": a replica started
	// with spine serve --guest data then starts from the cache too; the
	// data Guest's adds about 190 MB to the image).
	Guests []string
	// CACerts is the bundle of CA certificates to copy in (default Debian's,
	// /etc/ssl/certs/ca-certificates.crt, from the package ca-certificates).
	CACerts string
	// Version and Revision label the image (org.opencontainers.image.*).
	Version, Revision string
	// Work is a folder for the binary and the cache; default a temporary one.
	Work string
	// Log, when set, gets a line for each step.
	Log io.Writer
}

// Build builds the spine binary (CGO_ENABLED=0, so static), fills its
// compilation cache with spine warm, and returns the image.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.CACerts == "" {
		o.CACerts = CACerts
	}
	if !o.NoCache && o.Arch != runtime.GOARCH {
		return nil, fmt.Errorf("the cache can be filled only for %s, this machine's architecture: build on a %s machine, or leave the cache out", runtime.GOARCH, o.Arch)
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	work := o.Work
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "spine-image-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(work)
	}
	bin := filepath.Join(work, "spine")
	logf("building %s (linux/%s, static)", bin, o.Arch)
	// The command is a module of its own (cmd/spine), built with its
	// siblings from the source's go.work.
	build := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, ".")
	build.Dir = filepath.Join(o.Source, "cmd", "spine")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates (apt-get install ca-certificates): %w", err)
	}
	base := newLayer()
	base.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n"))
	base.file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	base.file(strings.TrimPrefix(CACerts, "/"), 0o644, certs)
	base.dir("tmp", 0o1777, 0)
	base.dir(strings.TrimPrefix(CacheDir, "/"), 0o755, UID)
	spine, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	binLayer := newLayer()
	binLayer.file(strings.TrimPrefix(Binary, "/"), 0o755, spine)
	layers := []*layer{base, binLayer}
	if !o.NoCache {
		cache := filepath.Join(work, "cache")
		logf("filling the compilation cache in %s (spine warm)", cache)
		for _, guest := range append([]string{"default"}, o.Guests...) {
			logf("spine warm --guest %s", guest)
			warm := exec.CommandContext(ctx, bin, "warm", "--cache-dir", cache, "--guest", guest)
			warm.Env = append(os.Environ(), "SPINE_CONFIG=", "SPINE_CACHE_SEED=")
			if out, err := warm.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("spine warm --guest %s: %v\n%s", guest, err, out)
			}
		}
		seed := newLayer()
		if err := seed.tree(strings.TrimPrefix(SeedDir, "/"), cache); err != nil {
			return nil, err
		}
		layers = append(layers, seed)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		tl, err := l.v1()
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, tl); err != nil {
			return nil, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = o.Arch, "linux"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config = Config(o.Version, o.Revision)
	return mutate.ConfigFile(img, cfg)
}

// Config is the image's run configuration: the user, the entrypoint and its
// default arguments, the environment, the port and the labels.
func Config(version, revision string) v1.Config {
	labels := map[string]string{
		"org.opencontainers.image.title":       "spine",
		"org.opencontainers.image.description": "Spine: Python programs in a WebAssembly sandbox that call tools, over HTTP",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      "https://github.com/spine-run/spine",
		"org.opencontainers.image.version":     version,
	}
	if revision != "" {
		labels["org.opencontainers.image.revision"] = revision
	}
	return v1.Config{
		User:       User,
		Entrypoint: []string{Binary},
		Cmd:        []string{"serve", "--listen", fmt.Sprintf(":%d", Port)},
		Env: []string{
			"PATH=/usr/local/bin",
			"HOME=/nonexistent",
			"SSL_CERT_FILE=" + CACerts,
			"SPINE_CACHE_DIR=" + CacheDir,
			"SPINE_CACHE_SEED=" + SeedDir,
		},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", Port): {}},
		Labels:       labels,
		StopSignal:   "SIGTERM",
	}
}

// Write writes img as an OCI image layout in dir (made anew) and, when tar
// is not "", as a tarball that docker load and podman load take, tagged ref.
func Write(img v1.Image, dir, tarPath, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return err
	}
	if err := readableByAll(dir); err != nil {
		return err
	}
	if tarPath == "" {
		return nil
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(tarPath, tag, img)
}

// readableByAll makes every file of the layout in dir readable by every
// user, as its folders are: go-containerregistry writes a blob whose digest
// it learns while writing (a layer's) to a temporary file, which is 0600,
// so a registry client or image tool run as another user could read the
// index and the manifests but not the layers.
func readableByAll(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if mode := info.Mode().Perm(); mode&0o444 != 0o444 {
			return os.Chmod(p, mode|0o444)
		}
		return nil
	})
}

// Read reads the image an OCI image layout in dir holds (Write's).
func Read(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

// epoch is every file's time in the image, and the image's: the build is
// the same from the same inputs.
var epoch = time.Unix(0, 0).UTC()

// layer is a layer's tar archive, built in memory.
type layer struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	dirs map[string]bool
	err  error
}

func newLayer() *layer {
	l := &layer{dirs: map[string]bool{}}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

// parents adds the folders above name that the layer lacks, root's, 0755,
// outermost first.
func (l *layer) parents(name string) {
	if d := path.Dir(name); d != "." && !l.dirs[d] {
		l.dir(d, 0o755, 0)
	}
}

func (l *layer) dir(name string, mode int64, uid int) {
	if l.dirs[name] {
		return
	}
	l.parents(name)
	l.dirs[name] = true
	l.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid})
}

func (l *layer) file(name string, mode int64, data []byte) {
	l.parents(name)
	if l.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}) {
		_, l.err = l.tw.Write(data)
	}
}

func (l *layer) header(h *tar.Header) bool {
	if l.err != nil {
		return false
	}
	h.ModTime, h.Format = epoch, tar.FormatPAX
	l.err = l.tw.WriteHeader(h)
	return l.err == nil
}

// tree adds the files under src at prefix, in name order, readable by all
// and writable by none: the cache is the image's, copied where it is
// written. The temporary files of a writer that died are left out.
func (l *layer) tree(prefix, src string) error {
	var files []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !strings.HasSuffix(p, ".tmp") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("spine warm left the cache empty")
	}
	sort.Strings(files)
	l.dir(prefix, 0o555, 0)
	for _, f := range files {
		rel, _ := filepath.Rel(src, f)
		name := path.Join(prefix, filepath.ToSlash(rel))
		l.dirsUnder(prefix, path.Dir(name))
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		l.file(name, 0o444, data)
	}
	return l.err
}

// dirsUnder adds the folders from prefix down to dir, 0555.
func (l *layer) dirsUnder(prefix, dir string) {
	if dir == prefix || l.dirs[dir] {
		return
	}
	l.dirsUnder(prefix, path.Dir(dir))
	l.dir(dir, 0o555, 0)
}

// v1 is the layer as go-containerregistry's, gzip-compressed, of the OCI
// media type.
func (l *layer) v1() (v1.Layer, error) {
	if l.err != nil {
		return nil, l.err
	}
	if err := l.tw.Close(); err != nil {
		return nil, err
	}
	data := l.buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
