package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spine-run/spine/internal/seed"
)

// Stats are the percentiles of a set of durations, in milliseconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

// summarize returns the percentiles of samples.
func summarize(samples []time.Duration) Stats {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return Stats{N: len(s), P50: ms(percentile(s, 0.50)), P95: ms(percentile(s, 0.95)), P99: ms(percentile(s, 0.99))}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func f4(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// ModeResult is one start mode's figures, or the error that kept it from
// being measured (cow off Linux).
type ModeResult struct {
	Mode       string          `json:"mode"`
	Start      string          `json:"start"`     // the Runner's resolved start mode
	PoolSize   int             `json:"pool_size"` // 0: no pool
	Latency    Stats           `json:"latency"`
	RunsPerSec map[int]float64 `json:"runs_per_sec"` // by concurrency
	RSSMiB     float64         `json:"rss_mib"`      // process VmRSS after the mode's runs
	Error      string          `json:"error,omitempty"`
}

// ToolCall is the cost of one tool call, measured inside the Guest.
type ToolCall struct {
	Runs    int     `json:"runs"`
	CallUs  float64 `json:"call_us"`  // median of (tool − plain) per call
	BestUs  float64 `json:"best_us"`  // the lowest (tool − plain) of the runs
	ToolUs  float64 `json:"tool_us"`  // median per lookup call
	PlainUs float64 `json:"plain_us"` // median per plain call
}

// Ratio is one figure divided by another, both measured in the same Run.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Target is one of the project's performance targets and its verdict.
type Target struct {
	Name   string  `json:"name"`
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Met    *bool   `json:"met"` // nil: not measured
}

// Report is everything a Run measured, with the machine it ran on.
type Report struct {
	Date        string       `json:"date"`
	Platform    string       `json:"platform"`
	CPU         string       `json:"cpu"`
	NumCPU      int          `json:"num_cpu"`
	GOMAXPROCS  int          `json:"gomaxprocs"`
	GoVersion   string       `json:"go_version"`
	Program     string       `json:"program"`
	Modes       []ModeResult `json:"modes"`
	Native      *Native      `json:"native,omitempty"`
	ToolCall    *ToolCall    `json:"tool_call,omitempty"`
	ClientTools *ClientTools `json:"client_tools,omitempty"`
	Overhead    *Overhead    `json:"overhead,omitempty"`
	Compute     *Compute     `json:"compute,omitempty"`
	Numpy       *Numpy       `json:"numpy,omitempty"`
	Memory      *Memory      `json:"memory,omitempty"`
	ColdStart   *ColdStart   `json:"cold_start,omitempty"`
	Sessions    *Sessions    `json:"sessions,omitempty"`
	Ratios      []Ratio      `json:"ratios"`
	Targets     []Target     `json:"targets"`
}

func (r *Report) mode(name string) *ModeResult {
	for i := range r.Modes {
		if r.Modes[i].Mode == name && r.Modes[i].Error == "" {
			return &r.Modes[i]
		}
	}
	return nil
}

// assess computes the ratios and checks the project's performance targets.
func assess(r *Report) ([]Ratio, []Target) {
	var ratios []Ratio
	add := func(name string, a, b float64) {
		if a > 0 && b > 0 {
			ratios = append(ratios, Ratio{name, a / b})
		}
	}
	pool := r.mode("pool")
	if pool != nil && r.Native != nil {
		add("pool p50 / native compile+exec p50", pool.Latency.P50, r.Native.CompileExec.P50)
		add("pool p50 / native exec p50", pool.Latency.P50, r.Native.Exec.P50)
		add("python3 subprocess p50 / pool p50", r.Native.Subprocess.P50, pool.Latency.P50)
	}
	if o := r.Overhead; o != nil {
		add("empty program: pooled p50 / bare host p50", o.Pooled.P50, o.Bare.P50)
	}
	if c := r.Compute; c != nil {
		ratios = append(ratios, Ratio{"compute: Guest / native, geometric mean", c.GeoMean})
	}
	if pool != nil {
		for _, name := range []string{"fresh", "copy", "cow"} {
			if m := r.mode(name); m != nil {
				add(name+" p50 / pool p50", m.Latency.P50, pool.Latency.P50)
			}
		}
		if r.Native != nil {
			for _, name := range []string{"fresh", "copy", "cow"} {
				if m := r.mode(name); m != nil {
					add("python3 subprocess p50 / "+name+" p50", r.Native.Subprocess.P50, m.Latency.P50)
				}
			}
		}
	}

	if ss := r.Sessions; ss != nil {
		add("session run p50 / pooled p50 (sessions suite)", ss.Run.P50, ss.Pool.P50)
		add("session snapshot p50 / pooled p50", ss.Snapshot.P50, ss.Pool.P50)
		add("restore + first run p50 / pooled p50", ss.RestoreRun.P50, ss.Pool.P50)
		if h := ss.Held; h != nil {
			add("wake of a hibernated session p50 / pooled p50", h.Wake.P50, ss.Pool.P50)
		}
	}

	var targets []Target
	check := func(name, figure string, value float64, measured, met bool) {
		t := Target{Name: name, Figure: figure, Value: value}
		if measured {
			t.Met = &met
		}
		targets = append(targets, t)
	}
	var poolP50, poolRate2 float64
	if pool != nil {
		poolP50, poolRate2 = pool.Latency.P50, pool.RunsPerSec[2]
	}
	check("warm run p50 ≤ 0.2 ms", fmt.Sprintf("%.3f ms", poolP50), poolP50, pool != nil, poolP50 <= 0.2)
	var vsNative, vsProc float64
	if pool != nil && r.Native != nil {
		vsNative = poolP50 / r.Native.CompileExec.P50
		vsProc = r.Native.Subprocess.P50 / poolP50
	}
	check("warm run p50 ≤ 15× native in-process (compile+exec)", fmt.Sprintf("%.1f×", vsNative), vsNative, vsNative > 0, vsNative <= 15)
	var overhead float64
	if r.Overhead != nil {
		overhead = r.Overhead.Overhead
	}
	check("empty program: pooled p50 − bare host p50 ≤ 0.08 ms", fmt.Sprintf("%.3f ms", overhead), overhead, r.Overhead != nil, overhead <= 0.08)
	var compute float64
	if r.Compute != nil {
		compute = r.Compute.GeoMean
	}
	check("compute: Guest / native, geometric mean ≤ 2.5×", fmt.Sprintf("%.2f×", compute), compute, r.Compute != nil, compute <= 2.5)
	check("≥ 30× faster than a python3 subprocess per run", fmt.Sprintf("%.1f×", vsProc), vsProc, vsProc > 0, vsProc >= 30)
	var call float64
	if r.ToolCall != nil {
		call = r.ToolCall.CallUs
	}
	check("one tool call ≤ 15 µs", fmt.Sprintf("%.1f µs", call), call, r.ToolCall != nil, call <= 15)
	check("≥ 2,000 runs/s at concurrency 2", fmt.Sprintf("%.0f runs/s", poolRate2), poolRate2, pool != nil, poolRate2 >= 2000)
	var rss float64
	memOK := r.Memory != nil && !r.Memory.NoProc && r.Memory.Instances == 64
	if memOK {
		rss = max(r.Memory.Idle.RSSMiB, r.Memory.Ran.RSSMiB) // idle as made, or idle after a run each
	}
	check("64 idle warm instances ≤ 512 MiB RSS", fmt.Sprintf("%.0f MiB", rss), rss, memOK, rss <= 512)
	var first float64
	coldOK := r.ColdStart != nil && len(r.ColdStart.Warm) > 0
	if coldOK {
		first = r.ColdStart.WarmFirst.P50
	}
	check("first result in a new process ≤ 150 ms, warm caches", fmt.Sprintf("%.0f ms", first), first, coldOK, first <= 150)

	ss := r.Sessions
	var snapKiB, snapMs, restoreMore, sessionRatio float64
	if ss != nil {
		snapKiB, snapMs = float64(ss.SnapshotBytes.P50)/1024, ss.Snapshot.P50
		restoreMore = ss.RestoreRun.P50 - ss.Pool.P50
		sessionRatio = ss.Run.P50 / ss.Pool.P50
	}
	check("session snapshot ≤ 256 KiB", fmt.Sprintf("%.0f KiB", snapKiB), snapKiB, ss != nil, snapKiB <= 256)
	check("session snapshot p50 ≤ 5 ms", fmt.Sprintf("%.2f ms", snapMs), snapMs, ss != nil, snapMs <= 5)
	check("restore + first run p50 ≤ pooled run p50 + 5 ms", fmt.Sprintf("%+.2f ms", restoreMore), restoreMore, ss != nil, restoreMore <= 5)
	check("session run p50 ≤ 1.2× pooled run p50", fmt.Sprintf("%.2f×", sessionRatio), sessionRatio, ss != nil, sessionRatio <= 1.2)
	var heldRSS, wake50, wake99 float64
	held := ss != nil && ss.Held != nil
	heldOK := held && ss.Held.Sessions >= 10000 && !ss.Held.Held.noProc()
	if held {
		heldRSS, wake50, wake99 = ss.Held.Held.RSSMiB, ss.Held.Wake.P50, ss.Held.Wake.P99
	}
	check("10,000 sessions in one Runner ≤ 2 GiB RSS", fmt.Sprintf("%.0f MiB", heldRSS), heldRSS, heldOK, heldRSS <= 2048)
	check("wake of a hibernated session p50 ≤ 10 ms", fmt.Sprintf("%.2f ms", wake50), wake50, held, wake50 <= 10)
	check("wake of a hibernated session p99 ≤ 10 ms", fmt.Sprintf("%.2f ms", wake99), wake99, held, wake99 <= 10)
	return ratios, targets
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Print writes the report as text: a table of the modes and baselines, then
// the tool call, memory, cold start, ratios and targets.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "spine bench  %s  %s, %s, %d CPUs (GOMAXPROCS %d), %s\n", r.Date, r.Platform, r.CPU, r.NumCPU, r.GOMAXPROCS, r.GoVersion)
	fmt.Fprintf(w, "program (inputs {\"quantity\": 3}, lookup(key=\"book\") = 21):\n%s\n", seed.Indent(r.Program))

	type row struct {
		name  string
		cells []string
	}
	var rows []row
	for _, m := range r.Modes {
		if m.Error != "" {
			rows = append(rows, row{m.Mode, []string{m.Error}})
			continue
		}
		rows = append(rows, row{m.Mode, []string{strconv.Itoa(m.Latency.N), f3(m.Latency.P50), f3(m.Latency.P95), f3(m.Latency.P99),
			f0(m.RunsPerSec[1]), f0(m.RunsPerSec[2]), f0(m.RunsPerSec[4]), f0(m.RSSMiB)}})
	}
	if n := r.Native; n != nil {
		name := filepath.Base(n.Python) + " " + n.Version
		rows = append(rows,
			row{"native " + name + " in-process, exec", []string{strconv.Itoa(n.Exec.N), f4(n.Exec.P50), f4(n.Exec.P95), f4(n.Exec.P99)}},
			row{"native " + name + " in-process, compile+exec", []string{strconv.Itoa(n.CompileExec.N), f4(n.CompileExec.P50), f4(n.CompileExec.P95), f4(n.CompileExec.P99)}},
			row{name + " subprocess per run", []string{strconv.Itoa(n.Subprocess.N), f3(n.Subprocess.P50), f3(n.Subprocess.P95), f3(n.Subprocess.P99)}})
	}
	width := len("mode")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rows) > 0 {
		fmt.Fprintf(tw, "%-*s\truns\tp50 ms\tp95 ms\tp99 ms\truns/s c=1\tc=2\tc=4\tRSS MiB\t\n", width, "mode (latency at concurrency 1)")
	}
	for _, x := range rows {
		cells := append(x.cells, make([]string, 8-min(len(x.cells), 8))...)
		fmt.Fprintf(tw, "%-*s\t%s\t\n", width, x.name, strings.Join(cells, "\t"))
	}
	tw.Flush()
	var notes []string
	for _, m := range r.Modes {
		if m.Error == "" {
			note := m.Mode + " = " + m.Start
			if m.PoolSize > 0 {
				note += fmt.Sprintf(" with a pool of %d", m.PoolSize)
			}
			notes = append(notes, note)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "(%s; runs/s: a fixed number of runs split over c goroutines, by wall time)\n", strings.Join(notes, ", "))
	}

	if o := r.Overhead; o != nil {
		fmt.Fprintf(w, "\nempty program, %d of each in alternating blocks of %d: pooled p50 %.3f ms (p95 %.3f), bare host p50 %.3f ms (p95 %.3f, one instance reused without a reset): %.3f ms more a run\n",
			o.Pooled.N, overheadBlock, o.Pooled.P50, o.Pooled.P95, o.Bare.P50, o.Bare.P95, o.Overhead)
	}
	if c := r.Compute; c != nil {
		c.print(w)
	}
	if n := r.Numpy; n != nil {
		n.print(w)
	}
	if tc := r.ToolCall; tc != nil {
		fmt.Fprintf(w, "\ntool call: %.2f µs per call (lookup %.2f µs − plain Python call %.2f µs; 1,000 of each per run, median of %d runs; best run %.2f µs)\n",
			tc.CallUs, tc.ToolUs, tc.PlainUs, tc.Runs, tc.BestUs)
	}
	if ct := r.ClientTools; ct != nil {
		ct.print(w)
	}
	if m := r.Memory; m != nil {
		if m.NoProc {
			fmt.Fprintf(w, "\nmemory: no /proc here\n")
		} else {
			fmt.Fprintf(w, "\nmemory, a pool of %d (filled in %.0f ms after New began):\n", m.Instances, m.FillMs)
			fmt.Fprintf(w, "  process RSS: %.1f MiB before New, %.1f MiB with %d ready, %.1f MiB with all %d idle, %.1f MiB after each ran once\n",
				m.Before.RSSMiB, m.First.RSSMiB, m.FirstReady, m.Idle.RSSMiB, m.Instances, m.Ran.RSSMiB)
			fmt.Fprintf(w, "  process Pss / Private_Dirty: %.1f / %.1f MiB idle, %.1f / %.1f MiB after each ran once\n",
				m.Idle.PssMiB, m.Idle.PrivateDirtyMiB, m.Ran.PssMiB, m.Ran.PrivateDirtyMiB)
			fmt.Fprintf(w, "  per instance: +%.0f KiB RSS idle (marginal), +%.0f KiB more after a run\n", m.MarginalKiB, m.RanExtraKiB)
			fmt.Fprintf(w, "  per instance linear memory (smaps, %d / %d instances found): Rss %.0f KiB, Private_Dirty %.0f KiB idle; Rss %.0f KiB, Private_Dirty %.0f KiB after a run\n",
				m.Idle.GuestMappings, m.Ran.GuestMappings, m.Idle.GuestRSSKiB, m.Idle.GuestDirtyKiB, m.Ran.GuestRSSKiB, m.Ran.GuestDirtyKiB)
		}
	}
	if c := r.ColdStart; c != nil {
		fmt.Fprintf(w, "\ncold start, process start to first result (this binary re-run: New with defaults and CacheDir, one Run):\n")
		for _, t := range c.Cold {
			fmt.Fprintf(w, "  empty cache folder: %.0f ms (New %.0f ms: compile + image capture; Run %.1f ms; exit at %.0f ms)\n", t.FirstResultMs, t.NewMs, t.RunMs, t.ExitMs)
		}
		if len(c.Warm) > 0 {
			fmt.Fprintf(w, "  warm caches, median of %d: %.0f ms (New %.0f ms, Run %.1f ms; exit at %.0f ms); p95 %.0f ms\n",
				len(c.Warm), c.WarmFirst.P50, c.WarmNew.P50, c.WarmRun.P50, c.WarmExit.P50, c.WarmFirst.P95)
		}
	}
	if ss := r.Sessions; ss != nil {
		ss.print(w)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (p50s measured in this command):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "  %s\t%.1f×\n", x.Name, x.Value)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nperformance targets:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		verdict := "not measured"
		figure := t.Figure
		if t.Met == nil {
			figure = "—"
		} else if *t.Met {
			verdict = "met"
		} else {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, figure, verdict)
	}
	tw.Flush()
}
