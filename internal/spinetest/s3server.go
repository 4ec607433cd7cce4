package spinetest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// StoreURLs is the session stores a test can write to for real, by kind: a
// file:// store in a new folder ("file") and, when SPINE_FLEET_VERSITYGW
// names versitygw's binary, an S3-compatible server (S3Server; "s3").
func StoreURLs(t *testing.T) map[string]string {
	t.Helper()
	urls := map[string]string{"file": "file://" + t.TempDir()}
	if url, ok := S3Server(t); ok {
		urls["s3"] = url
	} else {
		t.Log("SPINE_FLEET_VERSITYGW is not set: no S3-compatible server")
	}
	return urls
}

// S3Server starts versitygw, a real S3-compatible server, on loopback over
// a fresh directory, and returns the session store URL of a bucket in it;
// the credentials are set in the environment for the test (t.Setenv: not
// with t.Parallel). versitygw's binary is SPINE_FLEET_VERSITYGW (make
// fleet-test builds it into build/bin); without it, ok is false.
func S3Server(t *testing.T) (url string, ok bool) {
	t.Helper()
	bin := os.Getenv("SPINE_FLEET_VERSITYGW")
	if bin == "" {
		return "", false
	}
	const access, secret, bucket = "test-access-key", "test-secret-key-0123456789", "sessions"
	dir := t.TempDir()
	root, meta := filepath.Join(dir, "s3"), filepath.Join(dir, "meta")
	for _, d := range []string{filepath.Join(root, bucket), meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", addr, "--access", access, "--secret", secret, "--quiet", "posix", "--sidecar", meta, root)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			raw, _ := os.ReadFile(log.Name())
			t.Fatalf("versitygw exited: %s", raw)
		case <-time.After(20 * time.Millisecond): // polling, not a bound
		}
	}
	return fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&use_path_style=true", bucket, addr), true
}
