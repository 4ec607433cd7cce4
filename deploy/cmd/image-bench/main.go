// Command image-bench measures how fast a new replica of the image starts:
// the seconds from starting its entrypoint (in the image's unpacked root,
// read-only, as its user, with an empty --cache-dir as a new pod's emptyDir)
// to the answer of its first POST /v1/run, five times; it prints each and
// the median. make image-bench runs it on the image make image wrote.
//
//	go run ./cmd/image-bench [-image ../build/image/oci] [-n 5]
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spine-run/spine/deploy/image"
)

func main() {
	dir := flag.String("image", "../build/image/oci", "the OCI image layout (make image)")
	n := flag.Int("n", 5, "replicas to start, one after another")
	flag.Parse()
	if err := bench(*dir, *n); err != nil {
		fmt.Fprintln(os.Stderr, "image-bench:", err)
		os.Exit(1)
	}
}

func bench(dir string, n int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: to unpack the owners, chroot and run as the image's user")
	}
	img, err := image.Read(dir)
	if err != nil {
		return fmt.Errorf("%s: %w (run make image first)", dir, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "spine-image-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	os.Chmod(root, 0o755)
	if err := image.Unpack(img, root); err != nil {
		return err
	}
	if err := image.ReadOnly(root); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(root, "run"), 0o755); err != nil {
		return err
	}
	var times []time.Duration
	for i := range n {
		cache := filepath.Join(root, "run", fmt.Sprintf("cache-%d", i))
		if err := os.Mkdir(cache, 0o700); err != nil {
			return err
		}
		if err := os.Chown(cache, image.UID, image.UID); err != nil {
			return err
		}
		start := time.Now()
		r, err := image.Start(root, cf.Config, []string{"serve", "--listen", "127.0.0.1:0", "--cache-dir", "/run/" + filepath.Base(cache)}, nil)
		if err != nil {
			return err
		}
		listening := time.Since(start)
		resp, err := http.Post("http://"+r.Addr+"/v1/run", "application/json", strings.NewReader(`{"source": "21 * 2"}`))
		if err != nil {
			r.Stop()
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		r.Stop()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"value":42`) {
			return fmt.Errorf("POST /v1/run: %d %s", resp.StatusCode, body)
		}
		fmt.Printf("replica %d: listening after %.3f s, first /v1/run answered %.3f s after start\n", i+1, listening.Seconds(), took.Seconds())
		times = append(times, took)
	}
	slices.Sort(times)
	fmt.Printf("median of %d: %.3f s (process start to first /v1/run answered, baked cache, empty --cache-dir)\n", n, times[n/2].Seconds())
	return nil
}
