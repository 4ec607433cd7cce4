package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// weather is a tool the caller answers, as a run request declares it.
const weather = `{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}`

// pause is the answer to a run with client tools, paused or done.
type pause struct {
	Status  string          `json:"status"`
	RunID   string          `json:"run_id"`
	Value   json.RawMessage `json:"value"`
	Pending []struct {
		ID        string          `json:"id"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"pending"`
	Error *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

// startPaused starts, through base, a run asking get_weather twice, and
// returns its first pause.
func startPaused(base string, i int) (pause, error) {
	src := fmt.Sprintf("a = get_weather('a%d')\nb = get_weather('b%d')\n[a, b]", i, i)
	body, _ := json.Marshal(map[string]any{"source": src, "tools": []json.RawMessage{json.RawMessage(weather)}})
	return send(base+"/v1/run", string(body))
}

// answer sends the result v for p's one pending call through base.
func answer(base string, p pause, v string) (pause, error) {
	if len(p.Pending) != 1 {
		return pause{}, fmt.Errorf("pause %s lists %d calls, want 1", p.RunID, len(p.Pending))
	}
	body := fmt.Sprintf(`{"results": [{"id": %q, "value": %q}]}`, p.Pending[0].ID, v)
	return send(base+"/v1/runs/"+p.RunID+"/tool_results", body)
}

func send(url, body string) (pause, error) {
	status, raw, err := post(url, body)
	var p pause
	if err == nil {
		err = json.Unmarshal(raw, &p)
	}
	if err == nil && p.Error != nil {
		err = fmt.Errorf("status %d: %s: %s", status, p.Error.Kind, p.Error.Message)
	}
	return p, err
}

// pausedRuns: runs paused for their caller continue through HAProxy, each
// on the replica that holds it (every continuation of round-robin
// would reach another two times in three); a run whose replica was killed
// is answered 421 run_elsewhere, and 410 run_lost once the replica is back.
func pausedRuns(t *testing.T, f *fleet, base string) {
	const runs = 24
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		continued, misrouted int
		failed               []string
		replicas             = map[string]int{}
	)
	for i := range runs {
		wg.Go(func() {
			p, err := startPaused(base, i)
			if err == nil {
				mu.Lock()
				replicas[strings.SplitN(strings.TrimPrefix(p.RunID, "run_"), ".", 2)[0]]++
				mu.Unlock()
				if p, err = answer(base, p, "sun"); err == nil {
					p, err = answer(base, p, "rain")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if strings.Contains(err.Error(), "run_elsewhere") {
					misrouted++
				}
				failed = append(failed, err.Error())
			case p.Status != "done" || string(p.Value) != `["sun","rain"]`:
				failed = append(failed, fmt.Sprintf("run %s ended %s with %s", p.RunID, p.Status, p.Value))
			default:
				continued += 2
			}
		})
	}
	wg.Wait()
	fmt.Printf("FLEET paused runs=%d continued=%d misrouted=%d failed=%d by_replica=%v\n", runs, continued, misrouted, len(failed), replicas)
	if len(failed) > 0 {
		t.Errorf("%d paused runs failed, e.g. %s", len(failed), failed[0])
	}
	if len(replicas) < 2 {
		t.Errorf("the runs started on %v only: round-robin should spread them", replicas)
	}

	// A paused run on replica 1, which is then killed.
	var p pause
	for i := 0; !strings.HasPrefix(p.RunID, "run_r1."); i++ {
		var err error
		if p, err = startPaused(base, 100+i); err != nil || i > 30 {
			t.Fatalf("no run started on r1: %v", err)
		}
	}
	f.replicas[0].stop(syscall.SIGKILL)
	if _, err := answer(base, p, "sun"); err == nil || !strings.Contains(err.Error(), "run_elsewhere") || !strings.Contains(err.Error(), "replica r1") {
		t.Errorf("a continuation of a run whose replica died: %v, want run_elsewhere naming r1", err)
	}
	f.restart(t, 0)
	var err error
	for range 600 { // until HAProxy sees r1 up again: until then another replica answers
		if _, err = answer(base, p, "sun"); err == nil || !strings.Contains(err.Error(), "run_elsewhere") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "run_lost") {
		t.Errorf("a continuation reaching the restarted replica: %v, want run_lost", err)
	}
	drainPaused(t, f, base)
}

// drainPaused: a run paused on replica 2, which then drains (SIGTERM),
// continues through HAProxy once HAProxy sees the replica down (option persist),
// and the replica exits 0 once the run has ended.
func drainPaused(t *testing.T, f *fleet, base string) {
	var p pause
	for i := 0; !strings.HasPrefix(p.RunID, "run_r2."); i++ {
		var err error
		if p, err = startPaused(base, 200+i); err != nil || i > 30 {
			t.Fatalf("no run started on r2: %v", err)
		}
	}
	f.replicas[1].cmd.Process.Signal(syscall.SIGTERM)
	waitDown(t, f.lb, "r2")
	p, err := answer(base, p, "sun")
	if err == nil {
		p, err = answer(base, p, "rain")
	}
	if err != nil || p.Status != "done" || string(p.Value) != `["sun","rain"]` {
		t.Errorf("a paused run continued on its draining replica: %v %+v", err, p)
	}
	<-f.replicas[1].done
	if code := f.replicas[1].cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the drained replica exited %d", code)
	}
	fmt.Printf("FLEET paused_drain continued=%v\n", err == nil)
	f.restart(t, 1)
}

// waitDown polls HAProxy's statistics until it marks server down (at most
// a minute, as waitHTTP).
func waitDown(t *testing.T, lb, server string) {
	t.Helper()
	for range 600 {
		if resp, err := http.Get("http://" + lb + "/haproxy-stats;csv"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				fields := strings.Split(line, ",")
				if len(fields) > 17 && fields[0] == "replicas" && fields[1] == server && strings.HasPrefix(fields[17], "DOWN") {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("HAProxy never marked %s down", server)
}
