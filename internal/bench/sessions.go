package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/seed"
)

// sessionSetup is the first run of every session the sessions suite makes: a
// small state of a few globals, a class and its instance, and a module of the
// standard library the image has not imported.
const sessionSetup = `import statistics
class Basket:
    def __init__(self):
        self.items = {}
    def add(self, key, qty):
        self.items[key] = self.items.get(key, 0) + qty
    def total(self):
        return sum(lookup(key=k) * q for k, q in self.items.items())
basket = Basket()
basket.add("book", 2)
basket.add("pen", 3)
prices = [21, 2, 7.5, 13]
mean_price = statistics.mean(prices)
label = "small state"
result = basket.total()
`

// sessionSetupResult is sessionSetup's value: 2 books and 3 pens.
const sessionSetupResult = "48"

// sessionCheck reads the state sessionSetup left, and its expected value.
const (
	sessionCheck       = `result = [basket.total(), statistics.median(prices), mean_price, label]`
	sessionCheckResult = `[48,10.25,10.875,"small state"]`
)

// Sessions is the sessions suite: sessions holding sessionSetup's state,
// each figure beside pooled runs of the same program measured in the same
// suite (Pool).
type Sessions struct {
	Setup string `json:"setup"` // the first run of every session
	Runs  int    `json:"runs"`

	// Pool is runs of the benchmark's program on pooled Guests, alternating
	// with Run: the baseline of every ratio of the suite.
	Pool Stats `json:"pool"`
	// Run is runs of the same program in one session holding the state.
	Run Stats `json:"session_run"`

	// Snapshot is Session.Snapshot of that session, each after a run of the
	// program; SnapshotBytes the sizes of the snapshots it returned.
	Snapshot      Stats     `json:"snapshot"`
	SnapshotBytes SizeStats `json:"snapshot_bytes"`

	// Restore is Runner.Restore of a snapshot (decoding it included),
	// FirstRun the first Run of the restored session, RestoreRun the two
	// together (per restore, then the percentiles).
	Restore    Stats `json:"restore"`
	FirstRun   Stats `json:"first_run"`
	RestoreRun Stats `json:"restore_first_run"`

	// Held is one Runner holding many sessions; nil when not measured.
	Held *HeldSessions `json:"held,omitempty"`
}

// SizeStats are the median and range of a set of sizes, in bytes.
type SizeStats struct {
	N   int `json:"n"`
	Min int `json:"min"`
	P50 int `json:"p50"`
	Max int `json:"max"`
}

func summarizeSizes(sizes []int) SizeStats {
	if len(sizes) == 0 {
		return SizeStats{}
	}
	s := slices.Clone(sizes)
	slices.Sort(s)
	return SizeStats{N: len(s), Min: s[0], P50: s[(len(s)+1)/2-1], Max: s[len(s)-1]}
}

// HeldSessions is one Runner holding Sessions sessions, at most MaxLive of
// them live and the others hibernated, their snapshots in memory (without
// a cap: SessionOptions.HibernatedMemory is lifted) or, with OnDisk, in files
// (SessionOptions.Dir).
type HeldSessions struct {
	Sessions int  `json:"sessions"`
	MaxLive  int  `json:"max_live"`
	OnDisk   bool `json:"on_disk"`
	Live     int  `json:"live"` // live when the memory was read

	// MakeMs is making them all: NewSession, the setup run and Hibernate, one
	// session after the other. Make and Hibernate are each session's whole
	// making and its Hibernate alone.
	MakeMs    float64 `json:"make_ms"`
	Make      Stats   `json:"make"`
	Hibernate Stats   `json:"hibernate"`

	// Before is the process before the Runner was made; Held with every
	// session made and hibernated.
	Before MemorySnapshot `json:"before"`
	Held   MemorySnapshot `json:"held"`
	// HeapMiB is the Go heap in use (runtime.MemStats.HeapInuse) with the
	// sessions held: the hibernated sessions' snapshots are in it.
	HeapMiB float64 `json:"heap_mib"`
	// SnapshotMiB is the sizes of the sessions' snapshots added up.
	SnapshotMiB float64 `json:"snapshot_mib"`
	// PeakRSSMiB is the process's peak RSS (VmHWM) by the end.
	PeakRSSMiB float64 `json:"peak_rss_mib"`

	// Wake is the first Run of a random hibernated session: reading its
	// snapshot, a new Guest from it, and the run. Each woken session is
	// hibernated again (not timed).
	Wake Stats `json:"wake"`
}

// measureSessions is the sessions suite: runs pooled runs of the program
// alternating with runs of it in a session holding sessionSetup's state, then
// snapshots of that session, restores of its snapshot, and, when held > 0,
// one Runner holding held sessions.
func measureSessions(ctx context.Context, runs, held int, onDisk bool, progress func(string, ...any)) (*Sessions, error) {
	r, err := spine.New(ctx, manifest(), nil)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	if err := waitPool(ctx, r, 0); err != nil {
		return nil, err
	}
	res := &Sessions{Setup: sessionSetup, Runs: runs}
	req := request()
	pooled := func() error { return expect(r.Run(ctx, req)) }
	s, err := newSmallSession(ctx, r)
	if err != nil {
		return nil, err
	}
	defer s.Close(ctx)
	inSession := func() error { return expect(s.Run(ctx, req)) }

	progress("sessions: %d pooled runs alternating with %d session runs", runs, runs)
	warmup := min(max(runs/10, 2), 30)
	for i := 0; i < warmup; i++ {
		if err := pooled(); err != nil {
			return nil, err
		}
		if err := inSession(); err != nil {
			return nil, err
		}
	}
	var pool, run []time.Duration
	for i := 0; i < runs; i++ {
		// Alternate which goes first, so neither always follows the other.
		for _, session := range []bool{i%2 == 1, i%2 == 0} {
			f, out := pooled, &pool
			if session {
				f, out = inSession, &run
			}
			start := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			*out = append(*out, time.Since(start))
		}
	}
	res.Pool, res.Run = summarize(pool), summarize(run)

	progress("sessions: %d snapshots, each after a run", runs)
	var snaps []time.Duration
	var sizes []int
	var blob []byte
	for i := 0; i < runs; i++ {
		if err := inSession(); err != nil {
			return nil, err
		}
		start := time.Now()
		b, err := s.Snapshot(ctx)
		snaps = append(snaps, time.Since(start))
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, len(b))
		blob = b
	}
	res.Snapshot, res.SnapshotBytes = summarize(snaps), summarizeSizes(sizes)

	progress("sessions: %d restores, each with its first run", runs)
	var restores, firsts, both []time.Duration
	for i := 0; i < runs; i++ {
		start := time.Now()
		rs, err := r.Restore(ctx, blob)
		restored := time.Now()
		if err != nil {
			return nil, err
		}
		err = expect(rs.Run(ctx, req))
		ran := time.Now()
		if err == nil && i == 0 {
			err = expectValue(rs.Run(ctx, spine.Request{Source: sessionCheck}))(sessionCheckResult)
		}
		rs.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("a restored session: %w", err)
		}
		restores = append(restores, restored.Sub(start))
		firsts = append(firsts, ran.Sub(restored))
		both = append(both, ran.Sub(start))
	}
	res.Restore, res.FirstRun, res.RestoreRun = summarize(restores), summarize(firsts), summarize(both)
	s.Close(ctx)
	r.Close(ctx)

	if held > 0 {
		h, err := measureHeld(ctx, held, runs, onDisk, progress)
		if err != nil {
			return nil, err
		}
		res.Held = h
	}
	return res, nil
}

// newSmallSession makes a session of r and runs sessionSetup in it.
func newSmallSession(ctx context.Context, r *spine.Runner) (*spine.Session, error) {
	s, err := r.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	if err := expectValue(s.Run(ctx, spine.Request{Source: sessionSetup}))(sessionSetupResult); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("the setup run: %w", err)
	}
	return s, nil
}

// expect checks a run of the benchmark's program.
func expect(out *spine.Output, err error) error { return expectValue(out, err)("63") }

// expectValue checks a run's value.
func expectValue(out *spine.Output, err error) func(string) error {
	return func(want string) error {
		if err != nil {
			return err
		}
		if string(out.Value) != want {
			return fmt.Errorf("result %s, want %s", out.Value, want)
		}
		return nil
	}
}

// heldMaxLive is the live sessions of the Runner holding many: the default.
const heldMaxLive = 64

// measureHeld makes n sessions in one Runner, each with sessionSetup's state
// and hibernated at once (to files in a temporary folder if onDisk), reads
// the process's memory, then wakes wakes random ones.
func measureHeld(ctx context.Context, n, wakes int, onDisk bool, progress func(string, ...any)) (*HeldSessions, error) {
	runtime.GC()
	debug.FreeOSMemory()
	h := &HeldSessions{Sessions: n, MaxLive: heldMaxLive, OnDisk: onDisk, Before: snapMemory()}
	opts := spine.SessionOptions{
		MaxLive:          heldMaxLive,
		Max:              n,
		Idle:             -1,      // hibernated by the benchmark, at once
		HibernatedMemory: 1 << 62, // no cap: the memory they take is what is measured
	}
	if onDisk {
		dir, err := os.MkdirTemp("", "spine-bench-sessions-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		opts.Dir = dir
	}
	r, err := spine.New(ctx, manifest(), &spine.Options{Sessions: opts})
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	progress("sessions: making %d sessions, each hibernated after its setup run", n)
	all := make([]*spine.Session, 0, n)
	makes := make([]time.Duration, 0, n)
	hibernates := make([]time.Duration, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		s, err := newSmallSession(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("session %d: %w", i+1, err)
		}
		all = append(all, s)
		t1 := time.Now()
		if err := s.Hibernate(ctx); err != nil {
			return nil, fmt.Errorf("hibernating session %d: %w", i+1, err)
		}
		t2 := time.Now()
		makes = append(makes, t2.Sub(t0))
		hibernates = append(hibernates, t2.Sub(t1))
		if (i+1)%1000 == 0 && i+1 < n {
			progress("sessions: %d made", i+1)
		}
	}
	h.MakeMs = ms(time.Since(start))
	h.Make, h.Hibernate = summarize(makes), summarize(hibernates)

	var total int64
	for _, s := range all {
		b, err := s.Snapshot(ctx) // a hibernated session's snapshot: no wake
		if err != nil {
			return nil, err
		}
		total += int64(len(b))
	}
	h.SnapshotMiB = float64(total) / (1 << 20)
	h.Live = r.SessionStats().Live
	h.Held = snapMemory()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	h.HeapMiB = float64(mem.HeapInuse) / (1 << 20)

	progress("sessions: waking %d random hibernated sessions", wakes)
	rng := rand.New(rand.NewPCG(1, 2))
	req := request()
	var wake []time.Duration
	for i := 0; i < wakes; i++ {
		s := all[rng.IntN(len(all))]
		t0 := time.Now()
		err := expect(s.Run(ctx, req))
		wake = append(wake, time.Since(t0))
		if err != nil {
			return nil, fmt.Errorf("waking a session: %w", err)
		}
		if err := s.Hibernate(ctx); err != nil {
			return nil, err
		}
	}
	h.Wake = summarize(wake)
	h.PeakRSSMiB = float64(procStatus()["VmHWM"]) / 1024
	// The state survived hibernation and waking.
	if err := expectValue(all[0].Run(ctx, spine.Request{Source: sessionCheck}))(sessionCheckResult); err != nil {
		return nil, fmt.Errorf("a woken session: %w", err)
	}
	return h, nil
}

// noProc: the snapshot was read where there is no /proc.
func (m MemorySnapshot) noProc() bool { return m.RSSMiB == 0 }

// print writes the sessions section of a report.
func (ss *Sessions) print(w io.Writer) {
	fmt.Fprintf(w, "\nsessions: each starts with this run (its state: globals, a class, statistics imported),\nthen runs the benchmark's program; %d of each measurement:\n%s\n", ss.Runs, seed.Indent(ss.Setup))
	type row struct {
		name  string
		stats Stats
		note  string
	}
	rows := []row{
		{"pooled run (the baseline)", ss.Pool, ""},
		{"run in a session", ss.Run, ""},
		{"Snapshot, after a run", ss.Snapshot, fmt.Sprintf("%.1f KiB (%.1f–%.1f)", kib(ss.SnapshotBytes.P50), kib(ss.SnapshotBytes.Min), kib(ss.SnapshotBytes.Max))},
		{"Restore", ss.Restore, ""},
		{"first run after Restore", ss.FirstRun, ""},
		{"Restore + first run", ss.RestoreRun, fmt.Sprintf("%+.2f ms over the pooled p50", ss.RestoreRun.P50-ss.Pool.P50)},
	}
	if h := ss.Held; h != nil {
		rows = append(rows, row{"wake a hibernated session (its first run)", h.Wake, fmt.Sprintf("one of %d, at random", h.Sessions)})
	}
	width := 0
	for _, x := range rows {
		width = max(width, utf8.RuneCountInString(x.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  %-*s\tn\tp50 ms\tp95 ms\tp99 ms\tp50 / pooled p50\t\n", width, "")
	for _, x := range rows {
		fmt.Fprintf(tw, "  %-*s\t%d\t%s\t%s\t%s\t%.2f×\t  %s\n", width, x.name, x.stats.N, f3(x.stats.P50), f3(x.stats.P95), f3(x.stats.P99), x.stats.P50/ss.Pool.P50, x.note)
	}
	tw.Flush()
	h := ss.Held
	if h == nil {
		return
	}
	where := "in memory"
	if h.OnDisk {
		where = "in a file (SessionOptions.Dir)"
	}
	fmt.Fprintf(w, "one Runner holding %d sessions (MaxLive %d; each made, run once and hibernated, its snapshot %s):\n", h.Sessions, h.MaxLive, where)
	fmt.Fprintf(w, "  made in %.1f s: per session p50 %.2f ms (p99 %.2f), of which Hibernate p50 %.2f ms (p99 %.2f)\n",
		h.MakeMs/1000, h.Make.P50, h.Make.P99, h.Hibernate.P50, h.Hibernate.P99)
	if h.Held.noProc() {
		fmt.Fprintf(w, "  memory: no /proc here\n")
		return
	}
	fmt.Fprintf(w, "  process RSS: %.1f MiB before the Runner, %.1f MiB holding them (%d live); Pss %.1f MiB, Private_Dirty %.1f MiB\n",
		h.Before.RSSMiB, h.Held.RSSMiB, h.Live, h.Held.PssMiB, h.Held.PrivateDirtyMiB)
	fmt.Fprintf(w, "  Go heap in use %.1f MiB; the snapshots %.1f MiB together (%.1f KiB each); peak RSS by the end %.1f MiB\n",
		h.HeapMiB, h.SnapshotMiB, h.SnapshotMiB*1024/float64(h.Sessions), h.PeakRSSMiB)
}

func kib(bytes int) float64 { return float64(bytes) / 1024 }
