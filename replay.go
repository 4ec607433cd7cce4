package spine

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ReplayOptions are a replay's own settings; nil means none.
type ReplayOptions struct {
	// Stdout and Stderr get the program's output as it runs, as
	// Request.Stdout and Stderr do.
	Stdout, Stderr io.Writer

	// Trace, when set, is called with each call as the replay answers it
	// from the record, on the run's goroutine.
	Trace func(ReplayedCall)
}

// Replay runs a recorded run's program again, from its record: each tool
// call is answered with the recorded response (no tool is called, not even
// the Runner's), each clock read and random byte is the recorded one, and a
// sleep does not wait. The Output is the recorded run's, byte for byte: its
// value, output and files (the record's Outcome is checked).
//
// The Runner must have the recorded run's Guest: the same artifact, and the
// same tools, packages and preloads (a Runner made with rec.Manifest() and
// the run's Options has). Replay refuses a record of another Guest, one
// Options.MaxRecord cut short, and a session's (whose state the record does
// not hold), with ErrBadRequest. When the program asks for something else
// than the record holds (another tool, other arguments, another order, more
// clock reads or random bytes), the replay stops there with an error
// matching ErrDiverged that names the first difference, with the Output so
// far.
func (r *Runner) Replay(ctx context.Context, rec *Record, opts *ReplayOptions) (*Output, error) {
	if err := r.replayable(rec); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &ReplayOptions{}
	}
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	p := newReplayer(rec, opts.Trace)
	req := Request{
		Source: rec.Source, Filename: rec.Filename, Inputs: rec.Inputs, Files: rec.Files,
		EarlyReads: rec.EarlyReads, Tools: manifestOf(rec.RunTools),
		Stdout: opts.Stdout, Stderr: opts.Stderr, replay: p,
	}
	out, err := r.run(ctx, req, nil)
	if p.err == nil && out != nil {
		p.end()
	}
	if p.err != nil {
		return out, p.err
	}
	if out == nil {
		return nil, err
	}
	if part := rec.Outcome.differs(outcomeOf(out, err)); part != "" {
		return out, fmt.Errorf("%w: the replay's %s is not the recorded run's (the run's error: %v)", ErrDiverged, part, err)
	}
	return out, err
}

// replayable says why the Runner cannot replay rec, or nil.
func (r *Runner) replayable(rec *Record) error {
	switch {
	case rec == nil:
		return fmt.Errorf("%w: no record", ErrBadRequest)
	case rec.Version != RecordVersion:
		return fmt.Errorf("%w: a record of version %d; this Spine replays version %d", ErrBadRequest, rec.Version, RecordVersion)
	case rec.Incomplete != "":
		return fmt.Errorf("%w: the record is incomplete: %s", ErrBadRequest, rec.Incomplete)
	case rec.Session != nil:
		return fmt.Errorf("%w: the record is of a run in session %s (after %d runs), whose state it does not hold", ErrBadRequest, rec.Session.ID, rec.Session.Runs)
	case rec.Guest.Artifact != r.guest.Artifact:
		return fmt.Errorf("%w: the record is of another Guest build (artifact %.12s, this Runner's %.12s)", ErrDiverged, rec.Guest.Artifact, r.guest.Artifact)
	case rec.Guest.Image != r.guest.Image:
		return fmt.Errorf("%w: the record's Guest had other tools, packages or preloads (image %.12s, this Runner's %.12s)%s",
			ErrDiverged, rec.Guest.Image, r.guest.Image, r.toolDifference(rec.Tools))
	}
	if _, _, err := r.runTools(manifestOf(rec.RunTools)); err != nil {
		return errors.Join(fmt.Errorf("%w: the record's run tools do not fit this Runner", ErrBadRequest), err)
	}
	return nil
}

// toolDifference names the first tool the Runner and a record's do not
// share, or "".
func (r *Runner) toolDifference(tools []RecordedTool) string {
	recorded := make(map[string]bool, len(tools))
	for _, t := range tools {
		recorded[t.Name] = true
		if _, ok := r.manifest[t.Name]; !ok {
			return fmt.Sprintf(": the record has the tool %s, this Runner does not", t.Name)
		}
	}
	for _, t := range recordedTools(r.manifest) {
		if !recorded[t.Name] {
			return fmt.Sprintf(": this Runner has the tool %s, the record does not", t.Name)
		}
	}
	return ""
}
