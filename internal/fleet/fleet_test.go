// Package fleet is the fleet test (make fleet-test, docs/performance.md,
// "A fleet"): a real S3-compatible server (versitygw), three spine serve
// replicas sharing it as their session store, and HAProxy in front of them
// with round-robin and no stickiness, all on loopback. It runs only when
// SPINE_FLEET_SPINE, SPINE_FLEET_VERSITYGW and SPINE_FLEET_HAPROXY name the
// programs (scripts/fleet-test.sh builds and installs them).
package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/spinetest"
)

const (
	bucket    = "sessions"
	accessKey = "fleet-access-key"
	secretKey = "fleet-secret-key-0123456789"
)

// freePort returns a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a program the test runs, its output in a file.
type proc struct {
	name string
	args []string
	env  []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); out.Close(); close(p.done) }()
}

// stop sends sig and waits for the exit; it returns the exit code.
func (p *proc) stop(sig syscall.Signal) int {
	p.cmd.Process.Signal(sig)
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// waitHTTP waits (at most a minute, polling) for url to answer 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	for range 600 {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", url)
}

// fleet is the servers of a test.
type fleet struct {
	dir      string
	store    string // the --session-store URL
	replicas []*proc
	addrs    []string
	lb       string // HAProxy's address
	haproxy  *proc
}

// balance is HAProxy's balance lines for a fleet's replicas.
type balance string

const (
	// roundRobin sends each request to the next replica: no stickiness,
	// so a session's runs land on any replica.
	roundRobin balance = "  balance roundrobin\n"
	// bySession hashes a request's path up to the session id
	// (/v1/sessions/ID), consistently: a session's runs go to one
	// replica while it is up, and to another (which loads it from the
	// store) when it is not. No cookie, no state in HAProxy.
	bySession balance = "  balance uri depth 3\n  hash-type consistent\n"
)

func startFleet(t *testing.T, replicas, slots int, lb balance) *fleet {
	t.Helper()
	f := &fleet{dir: t.TempDir()}
	root := filepath.Join(f.dir, "s3")
	if err := os.MkdirAll(filepath.Join(root, bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s3 := freePort(t)
	gw := &proc{name: "versitygw", log: filepath.Join(f.dir, "versitygw.log"),
		args: []string{os.Getenv("SPINE_FLEET_VERSITYGW"), "--port", s3, "--access", accessKey, "--secret", secretKey, "--quiet", "posix", "--sidecar", filepath.Join(f.dir, "meta"), root}}
	os.MkdirAll(filepath.Join(f.dir, "meta"), 0o755)
	gw.start(t)
	t.Cleanup(func() { gw.stop(syscall.SIGTERM) })
	for range 600 {
		if c, err := net.Dial("tcp", s3); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.store = fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&use_path_style=true", bucket, s3)
	for i := range replicas {
		addr := freePort(t)
		p := &proc{name: fmt.Sprintf("replica %d", i+1), log: filepath.Join(f.dir, fmt.Sprintf("replica%d.log", i+1)),
			env: []string{"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secretKey, "SPINE_TOKEN=", "SPINE_CONFIG="},
			args: []string{os.Getenv("SPINE_FLEET_SPINE"), "serve", "--listen", addr, "--slots", fmt.Sprint(slots), "--replica", fmt.Sprintf("r%d", i+1),
				"--session-store", f.store, "--session-write", "run", "--grace", "20s"}}
		p.start(t)
		t.Cleanup(func() {
			select {
			case <-p.done:
			default:
				p.stop(syscall.SIGKILL)
			}
		})
		f.replicas = append(f.replicas, p)
		f.addrs = append(f.addrs, addr)
	}
	for _, a := range f.addrs {
		waitHTTP(t, "http://"+a+"/readyz")
	}
	f.lb = freePort(t)
	cfg := fmt.Sprintf(`global
  maxconn 512
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  option redispatch
  retries 3
  retry-on conn-failure empty-response response-timeout 503
  option http-buffer-request
frontend fleet
  bind %s
  stats enable
  stats uri /haproxy-stats
  default_backend replicas
backend replicas
%s  option httpchk
  http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
  default-server inter 200ms fall 1 rise 2
`, f.lb, lb)
	cfg += "  option persist\n" // to a draining replica too, and elsewhere when it is dead (docs/scaling.md)
	// A paused run's continuation to its replica.
	for i := range f.addrs {
		cfg += fmt.Sprintf("  use-server r%d if { path_beg /v1/runs/run_r%d. }\n", i+1, i+1)
	}
	for i, a := range f.addrs {
		cfg += fmt.Sprintf("  server r%d %s check\n", i+1, a)
	}
	cfgPath := filepath.Join(f.dir, "haproxy.cfg")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	f.haproxy = &proc{name: "haproxy", log: filepath.Join(f.dir, "haproxy.log"), args: []string{os.Getenv("SPINE_FLEET_HAPROXY"), "-db", "-f", cfgPath}}
	f.haproxy.start(t)
	t.Cleanup(func() { f.haproxy.stop(syscall.SIGTERM) })
	waitHTTP(t, "http://"+f.lb+"/readyz")
	return f
}

// restart starts replica i again on its address, and waits until it is ready.
func (f *fleet) restart(t *testing.T, i int) {
	t.Helper()
	f.replicas[i].start(t)
	waitHTTP(t, "http://"+f.addrs[i]+"/readyz")
}

// result is the answer to a run.
type result struct {
	Value json.RawMessage `json:"value"`
	Error *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

var client = &http.Client{Timeout: 60 * time.Second}

// post sends body to url; it retries, as a client honouring Retry-After
// would, an answer 429 or 503 and a connection that failed (at most 2,400
// times, 25 ms apart: a minute, so that one replica of one slot taking over
// the paused runs of two others gets through them on a loaded machine), and
// returns the last status and answer.
func post(url, body string) (int, []byte, error) {
	var (
		status int
		raw    []byte
		err    error
	)
	for range 2400 {
		var resp *http.Response
		resp, err = client.Post(url, "application/json", strings.NewReader(body))
		if err == nil {
			raw, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if err == nil && status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
				return status, raw, nil
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	return status, raw, err
}

// createSession makes a session through base and returns its id.
func createSession(t *testing.T, base string) string {
	t.Helper()
	status, raw, err := post(base+"/v1/sessions", "")
	var info struct{ ID string }
	if err != nil || status != 201 || json.Unmarshal(raw, &info) != nil {
		t.Fatalf("create: %d %s %v", status, raw, err)
	}
	return info.ID
}

// step is run k of a session: it appends k to the session's list unless
// the list holds it already (a retried run applies once), and answers the
// list's length and sum, which the test checks against what it sent.
func step(base, id string, k int) (time.Duration, error) {
	src := fmt.Sprintf("try:\n    items\nexcept NameError:\n    items = []\nif not items or items[-1] < %d:\n    items.append(%d)\nresult = [len(items), sum(items)]", k, k)
	body, _ := json.Marshal(map[string]any{"source": src})
	begun := time.Now()
	status, raw, err := post(base+"/v1/sessions/"+id+"/run", string(body))
	took := time.Since(begun)
	if err != nil {
		return took, err
	}
	var r result
	if status != 200 || json.Unmarshal(raw, &r) != nil || r.Error != nil {
		return took, fmt.Errorf("status %d: %s", status, raw)
	}
	if want := fmt.Sprintf("[%d,%d]", k, k*(k+1)/2); string(r.Value) != want {
		return took, fmt.Errorf("state lost: %s after run %d, want %s", r.Value, k, want)
	}
	return took, nil
}

// workload runs rounds of a run in each of n sessions through base, the
// sessions in parallel; during it, chaos runs once the first round is done.
// It returns the runs, the runs that failed (with why) and the sessions
// lost.
type tally struct {
	mu       sync.Mutex
	runs     int
	failed   []string
	lost     map[string]bool
	duration time.Duration
}

func workload(t *testing.T, base string, sessions, rounds int, chaos func()) *tally {
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = createSession(t, base)
	}
	tl := &tally{lost: map[string]bool{}}
	var wg sync.WaitGroup
	firstRound := make(chan struct{}, sessions)
	begun := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			for k := 1; k <= rounds; k++ {
				_, err := step(base, id, k)
				tl.mu.Lock()
				tl.runs++
				if err != nil {
					tl.failed = append(tl.failed, err.Error())
					if strings.Contains(err.Error(), "state lost") || strings.Contains(err.Error(), "not_found") {
						tl.lost[id] = true
						tl.failed = append(tl.failed[:len(tl.failed)-1], "LOST "+err.Error())
						tl.mu.Unlock()
						return
					}
				}
				tl.mu.Unlock()
				if k == 1 {
					firstRound <- struct{}{}
				}
			}
		})
	}
	if chaos != nil {
		for range sessions {
			<-firstRound
		}
		chaos()
	}
	wg.Wait()
	tl.duration = time.Since(begun)
	return tl
}

// rate is a workload's runs per second.
func rate(tl *tally) float64 { return float64(tl.runs) / tl.duration.Seconds() }

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func TestFleet(t *testing.T) {
	for _, v := range []string{"SPINE_FLEET_SPINE", "SPINE_FLEET_VERSITYGW", "SPINE_FLEET_HAPROXY"} {
		if os.Getenv(v) == "" {
			t.Skipf("%s is not set: run make fleet-test", v)
		}
	}
	f := startFleet(t, 3, 1, roundRobin)
	base := "http://" + f.lb

	// Chaos: kill -9 a replica, restart it; then roll all three with SIGTERM.
	tl := workload(t, base, 24, 40, func() {
		f.replicas[0].stop(syscall.SIGKILL)
		f.restart(t, 0)
		for i := range f.replicas {
			if code := f.replicas[i].stop(syscall.SIGTERM); code != 0 {
				t.Errorf("replica %d exited %d after SIGTERM", i+1, code)
			}
			f.restart(t, i)
		}
	})
	t.Logf("chaos: %d runs, %d failed, %d sessions lost", tl.runs, len(tl.failed), len(tl.lost))
	slices.Sort(tl.failed)
	for _, e := range tl.failed[:min(8, len(tl.failed))] {
		t.Logf("failed: %s", e)
	}
	if len(tl.failed) > 0 || len(tl.lost) > 0 {
		t.Errorf("%d runs failed, %d sessions lost", len(tl.failed), len(tl.lost))
	}
	fmt.Printf("FLEET chaos runs=%d failed=%d sessions_lost=%d\n", tl.runs, len(tl.failed), len(tl.lost))

	pausedRuns(t, f, base)

	// A 200 KiB session: a run on the replica holding it, and on one that
	// must load it from the store.
	a, b := "http://"+f.addrs[0], "http://"+f.addrs[1]
	var held, loaded []time.Duration
	for i := range 30 {
		id := createSession(t, a)
		post(a+"/v1/sessions/"+id+"/run", `{"source": "import statistics, fractions, decimal, json\nimport random\nblob = random.Random(1).randbytes(40_000)\nresult = len(blob)"}`)
		if _, err := step(a, id, 1); err != nil {
			t.Fatal(err)
		}
		d, err := step(a, id, 2)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
		if i == 0 {
			if resp, err := client.Get(a + "/v1/sessions/" + id + "/snapshot"); err == nil {
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				fmt.Printf("FLEET session_snapshot_bytes=%d\n", n)
			}
		}
		target := b
		if i%2 == 1 {
			target = "http://" + f.addrs[2]
		}
		d, err = step(target, id, 3)
		if err != nil {
			t.Fatal(err)
		}
		loaded = append(loaded, d)
	}
	fmt.Printf("FLEET run_held p50=%v p99=%v run_loaded p50=%v p99=%v\n",
		percentile(held, 0.5), percentile(held, 0.99), percentile(loaded, 0.5), percentile(loaded, 0.99))

	// Runs/s through HAProxy: three replicas of one slot each, round-robin
	// and by session; then one replica of three slots.
	three := workload(t, base, 12, 20, nil)
	for _, p := range f.replicas {
		p.stop(syscall.SIGTERM)
	}
	hashed := startFleet(t, 3, 1, bySession)
	sticky := workload(t, "http://"+hashed.lb, 12, 20, nil)
	var spread, loads []string
	for _, addr := range hashed.addrs {
		samples := spinetest.Metrics(t, "http://"+addr, "")
		var runs float64
		for name, v := range samples {
			if strings.HasPrefix(name, "spine_runs_total{") {
				runs += v
			}
		}
		spread = append(spread, fmt.Sprint(runs))
		loads = append(loads, fmt.Sprint(samples[`spine_session_store_operations_total{operation="load"}`]))
	}
	fmt.Printf("FLEET by_session runs_per_replica=%s loads_per_replica=%s\n", strings.Join(spread, ","), strings.Join(loads, ","))
	// An idle replica's SIGTERM: /readyz answers 503 before its listener
	// closes (--drain-delay), so that HAProxy's check sees it go.
	idle := hashed.replicas[0]
	idle.cmd.Process.Signal(syscall.SIGTERM)
	for {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + hashed.addrs[0] + "/readyz")
		if err != nil {
			t.Errorf("the idle replica's listener closed before /readyz answered 503: %v", err)
			break
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
	}
	<-idle.done // a second SIGTERM would end it at once
	if code := idle.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the idle replica exited %d after SIGTERM", code)
	}
	for _, p := range hashed.replicas {
		p.stop(syscall.SIGTERM)
	}
	one := startFleet(t, 1, 3, roundRobin)
	single := workload(t, "http://"+one.lb, 12, 20, nil)
	r3, rs, r1 := rate(three), rate(sticky), rate(single)
	fmt.Printf("FLEET runs_per_s three=%.1f three_by_session=%.1f one=%.1f ratio=%.2f ratio_by_session=%.2f\n", r3, rs, r1, r3/r1, rs/r1)
	if len(three.failed)+len(sticky.failed)+len(single.failed) > 0 {
		t.Errorf("throughput runs failed: %v %v %v", three.failed, sticky.failed, single.failed)
	}
	if len(sticky.lost) > 0 {
		t.Errorf("%d sessions lost with the by-session balance", len(sticky.lost))
	}
}
