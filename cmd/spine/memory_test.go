package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path → content) under a new folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCgroupLimit reads the memory limit as cgroup v2 and v1 lay it out,
// in a container (the cgroup's own files at the mount's root) and on a host.
func TestCgroupLimit(t *testing.T) {
	for name, c := range map[string]struct {
		files map[string]string
		want  uint64
	}{
		"v2 container": {map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "2147483648\n"}, 2 << 30},
		"v2 nested":    {map[string]string{"proc/self/cgroup": "0::/kubepods/pod1/c1\n", "sys/fs/cgroup/kubepods/pod1/c1/memory.max": "1073741824\n"}, 1 << 30},
		"v2 max":       {map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 0},
		"v1":           {map[string]string{"proc/self/cgroup": "5:cpuacct,cpu:/\n4:memory:/docker/abc\n", "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		"v1 no limit":  {map[string]string{"proc/self/cgroup": "4:memory:/\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		"none":         {map[string]string{}, 0},
		"garbage":      {map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "lots\n"}, 0},
	} {
		if got := cgroupLimit(writeTree(t, c.files)); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
}

// TestPlanMemory: the plan fits its budget; the shipped Deployment's 2 GiB
// with two CPUs holds live sessions; a budget too small says so.
func TestPlanMemory(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		budget  uint64
		runs    int
		session uint64
		onDisk  bool
		live    int
	}{
		{2048 * mib, 2, 256 * mib, false, 3},
		{2048 * mib, 2, 256 * mib, true, 5},
		{2048 * mib, 2, 128 * mib, false, 7},
		{64 << 30, 2, 256 * mib, false, 64}, // capped
	} {
		p, ok := planMemory(c.budget, c.runs, 256*mib, c.session, c.onDisk, 64)
		if !ok || p.live != c.live || p.need() > c.budget {
			t.Errorf("%d MiB, %d runs, sessions of %d MiB, on disk %v: ok %v, %d live, need %d MiB", c.budget/mib, c.runs, c.session/mib, c.onDisk, ok, p.live, p.need()/mib)
		}
	}
	if _, ok := planMemory(512*mib, 2, 256*mib, 256*mib, false, 64); ok {
		t.Error("512 MiB held two runs, a session and the base")
	}
}

// TestServeMemory: spine serve --memory derives --live-sessions and says
// so; flags that take more than the budget are warned about.
func TestServeMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	p, _ := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--memory", "2048", "--slots", "2")
	if said := strings.Join(p.before, "\n"); !strings.Contains(said, "memory 2048 MiB (--memory): 2 runs of up to 256 MiB, 3 live sessions of up to 256 MiB") {
		t.Errorf("no plan among\n%s", said)
	}
	p, _ = start(t, bin, "serve", "--listen", "127.0.0.1:0", "--memory", "2048", "--slots", "2", "--live-sessions", "64")
	if said := strings.Join(p.before, "\n"); !strings.Contains(said, "the flags take more memory than 2048 MiB (--memory): 64 live sessions") {
		t.Errorf("no warning among\n%s", said)
	}
}
