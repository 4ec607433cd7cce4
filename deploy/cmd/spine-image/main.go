// Command spine-image builds Spine's container image without a container
// daemon (package image) and writes it as an OCI image layout and as a
// tarball for docker load or podman load. make image runs it.
//
//	go run ./cmd/spine-image [-src ..] [-out ../build/image] [-tag spine:dev] [-arch amd64] [-no-cache] [-guest data]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spine-run/spine/deploy/image"
)

func main() {
	src := flag.String("src", "..", "the repository's folder (with go.work)")
	out := flag.String("out", "../build/image", "where to write the OCI layout (OUT/oci) and the tarball (OUT/spine.tar)")
	tag := flag.String("tag", "spine:dev", "the tarball's tag")
	arch := flag.String("arch", "", "the image's CPU architecture, as GOARCH (default this machine's)")
	noCache := flag.Bool("no-cache", false, "leave the compilation cache out (needed for another architecture)")
	guests := flag.String("guest", "", "Guests whose compiled code the cache holds besides the default one's, comma-separated (data: for spine serve --guest data)")
	flag.Parse()
	var extra []string
	for _, g := range strings.Split(*guests, ",") {
		if g = strings.TrimSpace(g); g != "" {
			extra = append(extra, g)
		}
	}
	version := strings.TrimPrefix(*tag, strings.Split(*tag, ":")[0]+":")
	img, err := image.Build(context.Background(), image.Options{
		Source: *src, Arch: *arch, NoCache: *noCache, Guests: extra, Version: version, Revision: revision(*src), Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "spine-image:", err)
		os.Exit(1)
	}
	layout, tarball := filepath.Join(*out, "oci"), filepath.Join(*out, "spine.tar")
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "spine-image:", err)
		os.Exit(1)
	}
	if err := image.Write(img, layout, tarball, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "spine-image:", err)
		os.Exit(1)
	}
	digest, _ := img.Digest()
	fmt.Printf("spine-image: %s %s\n  OCI layout: %s\n  tarball:    %s (docker load -i, podman load -i)\n", *tag, digest, layout, tarball)
}

// revision is the commit src is at, "" when git cannot tell.
func revision(src string) string {
	out, err := exec.Command("git", "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
