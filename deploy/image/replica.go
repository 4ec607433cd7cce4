package image

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes the image's file system, its layers flattened, into root,
// with the modes and owners the image gives (it must run as root for the
// owners). Names that would leave root are refused.
func Unpack(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(root)+string(filepath.Separator)) {
			return fmt.Errorf("the image holds %q, outside its root", h.Name)
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("the image holds %q, of a type this unpacker does not make (%c)", h.Name, h.Typeflag)
		}
		if err := os.Lchown(name, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(name, mode); err != nil {
			return err
		}
	}
}

// ReadOnly takes the write permission off everything under root, for
// everyone but root: run as another user, a process finds it read-only, as
// with a container's read-only root file system.
func ReadOnly(root string) error {
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		return os.Chmod(p, info.Mode()&^0o222&(os.ModePerm|os.ModeSticky))
	})
}

// Replica is the image's entrypoint running in an unpacked root.
type Replica struct {
	Cmd   *exec.Cmd
	Addr  string   // where it listens: host:port
	Lines []string // its standard error up to the line that says where it listens
	rest  chan string
	done  chan error
}

// Start runs the entrypoint of cfg with args (in place of cfg's Cmd, as a
// Kubernetes container's args) and cfg's environment plus env, in root
// (chroot), as cfg's user, and waits for the line where it says it listens.
// It must run as root.
func Start(root string, cfg v1.Config, args, env []string) (*Replica, error) {
	var uid, gid uint32
	if _, err := fmt.Sscanf(cfg.User, "%d:%d", &uid, &gid); err != nil {
		return nil, fmt.Errorf("the image's user %q is not UID:GID: %v", cfg.User, err)
	}
	cmd := &exec.Cmd{
		Path: cfg.Entrypoint[0],
		Args: append(append([]string{}, cfg.Entrypoint...), args...),
		Env:  append(append([]string{}, cfg.Env...), env...),
		Dir:  cfg.WorkingDir,
		SysProcAttr: &syscall.SysProcAttr{
			Chroot:     root,
			Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: true},
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Replica{Cmd: cmd, rest: make(chan string, 1024), done: make(chan error, 1)}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		r.Lines = append(r.Lines, line)
		if _, rest, ok := strings.Cut(line, "listening on http://"); ok {
			r.Addr = strings.Fields(rest)[0]
			go func() {
				for sc.Scan() {
					select {
					case r.rest <- sc.Text():
					default: // nobody reads: drop
					}
				}
				close(r.rest)
				r.done <- cmd.Wait()
			}()
			return r, nil
		}
	}
	err = cmd.Wait()
	return nil, fmt.Errorf("the entrypoint exited before listening (%v):\n%s", err, strings.Join(r.Lines, "\n"))
}

// Stop sends SIGTERM and returns the rest of the standard error and how the
// process exited.
func (r *Replica) Stop() ([]string, error) {
	r.Cmd.Process.Signal(syscall.SIGTERM)
	var lines []string
	for line := range r.rest {
		lines = append(lines, line)
	}
	return lines, <-r.done
}
