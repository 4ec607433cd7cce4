package cpytests

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Difference is a test whose outcome in the Guest is not its outcome natively.
type Difference struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`            // what differs, in words
	Guest  string `json:"guest"`           // outcome: detail, or "absent"
	Native string `json:"native"`          // the same, natively
	Trace  string `json:"trace,omitempty"` // the Guest's traceback, when it failed there
}

// SkipReason is a reason tests were skipped on one side, and how many.
type SkipReason struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// Module is one module's result: both sides, their counts and what differs.
type Module struct {
	Module       string       `json:"module"`
	Guest        *Report      `json:"guest"`
	Native       *Report      `json:"native"`
	GuestCounts  Counts       `json:"guest_counts"`
	NativeCounts Counts       `json:"native_counts"`
	Differences  []Difference `json:"differences"`
	GuestSkips   []SkipReason `json:"guest_skips"`
	NativeSkips  []SkipReason `json:"native_skips"`
}

// Compare puts the two sides of a module side by side.
func Compare(g, n *Report) *Module {
	m := &Module{
		Module: g.Module, Guest: g, Native: n,
		GuestCounts: g.Counts(), NativeCounts: n.Counts(),
		Differences: differences(g, n),
		GuestSkips:  skips(g), NativeSkips: skips(n),
	}
	return m
}

func describe(t *Test) string {
	if t == nil {
		return "absent"
	}
	if t.Detail == "" {
		return t.Outcome
	}
	return t.Outcome + ": " + t.Detail
}

func good(outcome string) bool { return outcome == Pass || outcome == XFail }

func differences(g, n *Report) []Difference {
	gt, nt := index(g), index(n)
	var ids []string
	for id := range gt {
		ids = append(ids, id)
	}
	for id := range nt {
		if _, ok := gt[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := []Difference{}
	for _, id := range ids {
		a, b := gt[id], nt[id]
		var kind string
		switch {
		case a == nil:
			kind = "runs natively only"
		case b == nil:
			kind = "runs in the Guest only"
		case a.Outcome == b.Outcome && (a.Outcome != Skip || a.Detail == b.Detail):
			continue
		case a.Outcome == b.Outcome:
			kind = "skipped on both sides for different reasons"
		case good(b.Outcome) && !good(a.Outcome) && a.Outcome != Skip:
			kind = "passes natively, fails in the Guest"
		case good(a.Outcome) && !good(b.Outcome) && b.Outcome != Skip:
			kind = "passes in the Guest, fails natively"
		case a.Outcome == Skip:
			kind = "skipped in the Guest only"
		case b.Outcome == Skip && !good(a.Outcome):
			kind = "fails in the Guest, skipped natively"
		case b.Outcome == Skip:
			kind = "skipped natively only"
		default:
			kind = "outcomes differ"
		}
		d := Difference{ID: id, Kind: kind, Guest: describe(a), Native: describe(b)}
		if a != nil && (a.Outcome == Fail || a.Outcome == Error) {
			d.Trace = g.Traces[id]
		}
		out = append(out, d)
	}
	return out
}

func index(r *Report) map[string]*Test {
	m := make(map[string]*Test, len(r.Tests))
	for i := range r.Tests {
		m[r.Tests[i].ID] = &r.Tests[i]
	}
	return m
}

func skips(r *Report) []SkipReason {
	count := map[string]int{}
	for _, t := range r.Tests {
		if t.Outcome == Skip {
			count[t.Detail]++
		}
	}
	out := make([]SkipReason, 0, len(count))
	for reason, c := range count {
		out = append(out, SkipReason{reason, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// Kinds counts m's differences by kind.
func (m *Module) Kinds() map[string]int {
	k := map[string]int{}
	for _, d := range m.Differences {
		k[d.Kind]++
	}
	return k
}

func side(r *Report, c Counts) string {
	if r.Status != StatusOK {
		s := r.Status
		if r.Status == StatusModuleMissing {
			s += " (" + r.Detail + ")"
		}
		if c.Run == 0 {
			return s
		}
		return fmt.Sprintf("%d/%d/%d/%d/%d %s", c.Run, c.Passed, c.Failed, c.Errors, c.Skipped, s)
	}
	return fmt.Sprintf("%d/%d/%d/%d/%d", c.Run, c.Passed, c.Failed, c.Errors, c.Skipped)
}

// Table writes one line per module: both sides' run/passed/failed/errors/skipped,
// the differences, and the seconds each side took.
func Table(w io.Writer, modules []*Module) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tGuest run/pass/fail/err/skip\tnative run/pass/fail/err/skip\tdifferences\tGuest s\tnative s")
	var total, totalNative Counts
	var diffs int
	var secs, secsNative float64
	for _, m := range modules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.1f\n", m.Module, side(m.Guest, m.GuestCounts),
			side(m.Native, m.NativeCounts), len(m.Differences), m.Guest.Seconds, m.Native.Seconds)
		total = add(total, m.GuestCounts)
		totalNative = add(totalNative, m.NativeCounts)
		diffs += len(m.Differences)
		secs += m.Guest.Seconds
		secsNative += m.Native.Seconds
	}
	fmt.Fprintf(tw, "total\t%s\t%s\t%d\t%.1f\t%.1f\n", side(&Report{Status: StatusOK}, total),
		side(&Report{Status: StatusOK}, totalNative), diffs, secs, secsNative)
	tw.Flush()
}

func add(a, b Counts) Counts {
	return Counts{a.Run + b.Run, a.Passed + b.Passed, a.Failed + b.Failed, a.Errors + b.Errors, a.Skipped + b.Skipped}
}

// Details writes, per module, every difference and every skip reason of each side.
func Details(w io.Writer, modules []*Module) {
	for _, m := range modules {
		var lines []string
		for _, s := range []struct {
			name string
			r    *Report
		}{{"Guest", m.Guest}, {"native", m.Native}} {
			if s.r.Status != StatusOK || s.r.Detail != "" {
				lines = append(lines, fmt.Sprintf("  %s: %s %s", s.name, s.r.Status, firstLines(s.r.Detail, 6)))
			}
		}
		for _, g := range groups(m.Differences) {
			lines = append(lines, fmt.Sprintf("  %d× %s, e.g. %s\n      Guest:  %s\n      native: %s",
				len(g), g[0].Kind, g[0].ID, g[0].Guest, g[0].Native))
		}
		for _, s := range []struct {
			name  string
			skips []SkipReason
		}{{"Guest", m.GuestSkips}, {"native", m.NativeSkips}} {
			for _, r := range s.skips {
				lines = append(lines, fmt.Sprintf("  skipped (%s) %d× %s", s.name, r.Count, r.Reason))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "%s\n%s\n", m.Module, strings.Join(lines, "\n"))
		}
	}
}

// groups puts together the differences of one kind whose two sides read the same
// (outcome and detail), the largest group first; a whole module absent on one side is
// one group.
func groups(ds []Difference) [][]Difference {
	index := map[[3]string]int{}
	var out [][]Difference
	for _, d := range ds {
		key := [3]string{d.Kind, d.Guest, d.Native}
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], d)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n    ")
}
