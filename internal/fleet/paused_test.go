package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
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
	Approvals []struct {
		ID        string          `json:"id"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"approvals"`
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
// would reach another two times in three); then durablePaused,
// durableApprovals and durableSessionRuns.
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

	durablePaused(t, f, base)
}

// durablePaused: runs paused on a replica that is then killed (r1) and on
// one that drains (r2) continue on another replica, from the session
// store: none lost, none continued twice, no call of a client tool asked
// twice (each run is asked a, then b, once each).
func durablePaused(t *testing.T, f *fleet, base string) {
	const perReplica = 4
	type held struct {
		i int
		p pause
	}
	var runs []held
	on := map[string]int{}
	for i := 0; on["r1"] < perReplica || on["r2"] < perReplica; i++ {
		if i > 60 {
			t.Fatalf("runs by replica %v: round-robin should spread them", on)
		}
		p, err := startPaused(base, 300+i)
		if err != nil {
			t.Fatal(err)
		}
		on[strings.SplitN(strings.TrimPrefix(p.RunID, "run_"), ".", 2)[0]]++
		runs = append(runs, held{300 + i, p})
	}
	f.replicas[0].stop(syscall.SIGKILL)
	f.replicas[1].cmd.Process.Signal(syscall.SIGTERM)
	var (
		wg                              sync.WaitGroup
		mu                              sync.Mutex
		continued, moved, lost, doubled int
		failed                          []string
	)
	for _, h := range runs {
		wg.Go(func() {
			var asked []string
			p := h.p
			var err error
			for _, v := range []string{"sun", "rain"} {
				if len(p.Pending) == 1 {
					asked = append(asked, string(p.Pending[0].Arguments))
				}
				if p, err = answer(base, p, v); err != nil {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				lost++
				failed = append(failed, fmt.Sprintf("run %s: %v", h.p.RunID, err))
			case p.Status != "done" || string(p.Value) != `["sun","rain"]`:
				lost++
				failed = append(failed, fmt.Sprintf("run %s ended %s with %s", p.RunID, p.Status, p.Value))
			default:
				continued++
				if p.RunID != h.p.RunID {
					moved++
				}
			}
			// Each call asked once: a, then b, never a again.
			if len(asked) != 2 || !strings.Contains(asked[0], fmt.Sprintf("a%d", h.i)) || !strings.Contains(asked[1], fmt.Sprintf("b%d", h.i)) {
				doubled++
				failed = append(failed, fmt.Sprintf("run %s asked %v", h.p.RunID, asked))
			}
		})
	}
	wg.Wait()
	fmt.Printf("FLEET paused_durable runs=%d on_killed=%d on_drained=%d continued=%d moved=%d lost=%d doubled=%d\n",
		len(runs), on["r1"], on["r2"], continued, moved, lost, doubled)
	for _, e := range failed[:min(4, len(failed))] {
		t.Errorf("%s", e)
	}
	if moved < on["r1"]+on["r2"] {
		t.Errorf("%d runs moved to another replica; %d were on the killed and the drained", moved, on["r1"]+on["r2"])
	}
	<-f.replicas[1].done
	if code := f.replicas[1].cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the drained replica exited %d", code)
	}
	f.restart(t, 0)
	f.restart(t, 1)
	durableApprovals(t, f, base)
}

// durableApprovals: runs waiting for their caller's decision (the
// replicas restarted with --demo-tools --ask lookup) on a replica that is
// then killed (r1) and on one that drains (r2) continue on another, from
// the session store: none lost, none continued twice, no approval or
// client tool call asked twice. Half the runs have a client tool between
// their two approvals; a quarter refuse the second. The replicas are then
// restarted without --ask, for the phases after.
func durableApprovals(t *testing.T, f *fleet, base string) {
	for i := range f.replicas {
		f.replicas[i].stop(syscall.SIGTERM)
		f.replicas[i].args = append(f.replicas[i].args, "--demo-tools", "--ask", "lookup")
		f.restart(t, i)
	}
	const perReplica = 4
	type held struct {
		i int
		p pause
	}
	var runs []held
	on := map[string]int{}
	for i := 0; on["r1"] < perReplica || on["r2"] < perReplica; i++ {
		if i > 60 {
			t.Fatalf("runs by replica %v: round-robin should spread them", on)
		}
		p, err := startAsking(base, i)
		if err != nil {
			t.Fatal(err)
		}
		on[strings.SplitN(strings.TrimPrefix(p.RunID, "run_"), ".", 2)[0]]++
		runs = append(runs, held{i, p})
	}
	f.replicas[0].stop(syscall.SIGKILL)
	f.replicas[1].cmd.Process.Signal(syscall.SIGTERM)
	var (
		wg                              sync.WaitGroup
		mu                              sync.Mutex
		continued, moved, lost, doubled int
		failed                          []string
	)
	for _, h := range runs {
		wg.Go(func() {
			asked, p, err := continueAsking(base, h.i, h.p)
			want, value := askingWants(h.i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				lost++
				failed = append(failed, fmt.Sprintf("run %s: %v", h.p.RunID, err))
			case p.Status != "done" || string(p.Value) != value:
				lost++
				failed = append(failed, fmt.Sprintf("run %s ended %s with %s, want %s", p.RunID, p.Status, p.Value, value))
			default:
				continued++
				if p.RunID != h.p.RunID {
					moved++
				}
			}
			if got := strings.Join(asked, " "); got != want {
				doubled++
				failed = append(failed, fmt.Sprintf("run %s asked %s, want %s", h.p.RunID, got, want))
			}
		})
	}
	wg.Wait()
	fmt.Printf("FLEET approvals_durable runs=%d on_killed=%d on_drained=%d continued=%d moved=%d lost=%d doubled=%d\n",
		len(runs), on["r1"], on["r2"], continued, moved, lost, doubled)
	for _, e := range failed[:min(4, len(failed))] {
		t.Errorf("%s", e)
	}
	if moved < on["r1"]+on["r2"] {
		t.Errorf("%d runs moved to another replica; %d were on the killed and the drained", moved, on["r1"]+on["r2"])
	}
	<-f.replicas[1].done
	if code := f.replicas[1].cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the drained replica exited %d", code)
	}
	f.replicas[2].stop(syscall.SIGTERM)
	for i := range f.replicas {
		f.replicas[i].args = f.replicas[i].args[:len(f.replicas[i].args)-3]
		f.restart(t, i)
	}
	durableSessionRuns(t, f, base)
}

// durableSessionRuns: sessions' runs paused on a replica that is then
// killed (r1) and on one that drains (r2) continue on another from the
// session store (--session-write run), in their session at the generation
// the run started from: none lost, none continued twice, no call asked
// twice, each run seeing its session's earlier state, and each session
// going on from its run's end.
func durableSessionRuns(t *testing.T, f *fleet, base string) {
	const perReplica = 3
	type held struct {
		i  int
		id string
		p  pause
	}
	// The sessions first, then their runs one after another, which
	// round-robin spreads over the replicas.
	ids := make([]string, 4*perReplica)
	for i := range ids {
		ids[i] = createSession(t, base)
		if status, raw, err := post(base+"/v1/sessions/"+ids[i]+"/run", fmt.Sprintf(`{"source": "x = %d"}`, i)); err != nil || status != 200 {
			t.Fatalf("session %s: %d %s %v", ids[i], status, raw, err)
		}
	}
	var runs []held
	on := map[string]int{}
	for i := 0; on["r1"] < perReplica || on["r2"] < perReplica; i++ {
		if i == len(ids) {
			t.Fatalf("session runs by replica %v: round-robin should spread them", on)
		}
		id := ids[i]
		src := fmt.Sprintf("a = get_weather('a%d')\nb = get_weather('b%d')\ny = [x, a, b]\ny", i, i)
		body, _ := json.Marshal(map[string]any{"source": src, "tools": []json.RawMessage{json.RawMessage(weather)}})
		p, err := send(base+"/v1/sessions/"+id+"/run", string(body))
		if err != nil || p.Status != "tool_calls" {
			t.Fatalf("session %s: %+v %v", id, p, err)
		}
		on[strings.SplitN(strings.TrimPrefix(p.RunID, "run_"), ".", 2)[0]]++
		runs = append(runs, held{i, id, p})
	}
	f.replicas[0].stop(syscall.SIGKILL)
	f.replicas[1].cmd.Process.Signal(syscall.SIGTERM)
	var (
		wg                              sync.WaitGroup
		mu                              sync.Mutex
		continued, moved, lost, doubled int
		failed                          []string
	)
	for _, h := range runs {
		wg.Go(func() {
			var asked []string
			p := h.p
			var err error
			for _, v := range []string{"sun", "rain"} {
				if len(p.Pending) == 1 {
					asked = append(asked, string(p.Pending[0].Arguments))
				}
				if p, err = answer(base, p, v); err != nil {
					break
				}
			}
			want := fmt.Sprintf(`[%d,"sun","rain"]`, h.i)
			var after []byte
			if err == nil && p.Status == "done" && string(p.Value) == want {
				var status int
				status, after, err = post(base+"/v1/sessions/"+h.id+"/run", `{"source": "y"}`)
				if err == nil && (status != 200 || !strings.Contains(string(after), `"value":`+want)) {
					err = fmt.Errorf("the session after its run: %d %s", status, after)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				lost++
				failed = append(failed, fmt.Sprintf("run %s: %v", h.p.RunID, err))
			case p.Status != "done" || string(p.Value) != want:
				lost++
				failed = append(failed, fmt.Sprintf("run %s ended %s with %s, want %s", p.RunID, p.Status, p.Value, want))
			default:
				continued++
				if p.RunID != h.p.RunID {
					moved++
				}
			}
			if len(asked) != 2 || !strings.Contains(asked[0], fmt.Sprintf("a%d", h.i)) || !strings.Contains(asked[1], fmt.Sprintf("b%d", h.i)) {
				doubled++
				failed = append(failed, fmt.Sprintf("run %s asked %v", h.p.RunID, asked))
			}
		})
	}
	wg.Wait()
	fmt.Printf("FLEET sessions_durable runs=%d on_killed=%d on_drained=%d continued=%d moved=%d lost=%d doubled=%d\n",
		len(runs), on["r1"], on["r2"], continued, moved, lost, doubled)
	for _, e := range failed[:min(4, len(failed))] {
		t.Errorf("%s", e)
	}
	if moved < on["r1"]+on["r2"] {
		t.Errorf("%d session runs moved to another replica; %d were on the killed and the drained", moved, on["r1"]+on["r2"])
	}
	<-f.replicas[1].done
	if code := f.replicas[1].cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the drained replica exited %d", code)
	}
	f.restart(t, 0)
	f.restart(t, 1)
}

// startAsking starts, through base, run i: it looks up book and pen, each
// call waiting for a decision, and even runs ask get_weather between.
func startAsking(base string, i int) (pause, error) {
	req := map[string]any{}
	src := "a = lookup(key='book')\nw = None\n"
	if i%2 == 0 {
		src = fmt.Sprintf("a = lookup(key='book')\nw = get_weather('w%d')\n", i)
		req["tools"] = []json.RawMessage{json.RawMessage(weather)}
	}
	req["source"] = src + "try:\n    b = lookup(key='pen')\nexcept PermissionError as e:\n    b = str(e)\n[a, w, b]"
	body, _ := json.Marshal(req)
	return send(base+"/v1/run", string(body))
}

// askingWants is what run i asks its caller, in order, and its value.
func askingWants(i int) (asked, value string) {
	asked, w := `approval_1{"key":"book"}`, "null"
	if i%2 == 0 {
		asked, w = asked+fmt.Sprintf(` {"city":"w%d"}`, i), `"sun"`
	}
	b := "2"
	if i%4 == 1 || i%4 == 2 {
		b = fmt.Sprintf(`"refused %d"`, i)
	}
	return asked + ` approval_2{"key":"pen"}`, fmt.Sprintf("[21,%s,%s]", w, b)
}

// continueAsking answers run i's pauses from p on, through base, to its
// end: it allows book, and pen but in runs 1 and 2 of every 4; it returns
// what the run asked.
func continueAsking(base string, i int, p pause) ([]string, pause, error) {
	var asked []string
	var err error
	for n := 0; p.Status != "done"; n++ {
		switch {
		case n > 4:
			return asked, p, fmt.Errorf("run %s asked %v and more", p.RunID, asked)
		case p.Status == "approval_required" && len(p.Approvals) == 1:
			a := p.Approvals[0]
			asked = append(asked, a.ID+string(a.Arguments))
			allow := a.ID != "approval_2" || i%4 == 0 || i%4 == 3
			body := fmt.Sprintf(`{"approvals": [{"id": %q, "allow": %v, "reason": "refused %d"}]}`, a.ID, allow, i)
			p, err = send(base+"/v1/runs/"+p.RunID+"/approvals", body)
		case p.Status == "tool_calls" && len(p.Pending) == 1:
			asked = append(asked, string(p.Pending[0].Arguments))
			p, err = answer(base, p, "sun")
		default:
			return asked, p, fmt.Errorf("run %s: status %q with %d pending, %d approvals", p.RunID, p.Status, len(p.Pending), len(p.Approvals))
		}
		if err != nil {
			return asked, p, err
		}
	}
	return asked, p, nil
}
