package spine

import (
	"context"
	"encoding/json"
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
	return r.replay(ctx, rec, opts, nil)
}

// replay is Replay's work, on a Guest of the pool or in session s (whose
// turn the caller holds).
func (r *Runner) replay(ctx context.Context, rec *Record, opts *ReplayOptions, s *Session) (*Output, error) {
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
	out, err := r.run(ctx, req, s)
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

// Continue carries on a run from its record, which may stop short of the
// run's end (ToolWait.Record, taken where the run waited for one of its own
// tools): the recorded part is replayed as Replay does (each call answered
// with its recorded response, no tool called, the recorded clock reads and
// random bytes, a sleep not waiting), and where the record ends the run goes
// on live: its next calls are made, its clock and random bytes are the
// system's. The run's own tools are numbered as they were (ToolCallOf), so
// the calls the record's run had pending where it waited are the same
// calls here, and req.Waiting hears of the same call again.
//
// req gives the run's own tools (the record's, by name, schema and
// description, with their Calls), Waiting, Stdout, Stderr, Timeout and
// Record (a continuation that records notes the replayed part too: its
// record is the whole run's); the program, its inputs and files are the
// record's, and a req that sets Source, Stream, Inputs, Files or Filename is
// refused (ErrBadRequest). The Output, and the writers, have the program's
// output from its start, the replayed part's included. The Runner must have the record's Guest, as for
// Replay; a program that asks for something else than the record holds
// before its end stops with an error matching ErrDiverged.
//
// A record taken at a wait lists the calls the run had started and not
// claimed there (Record.Waiting): early reads asked before the program
// needed them, and the call waited in. The recorded part starts no early
// read; at the program's first call past the record, which must be the
// call waited for, the continuation takes them up: one that had finished
// is answered by its recorded response, and a call of the run's own tools
// that had not is started again under its number, without asking
// Options.Approve again; the program's calls claim them by request, oldest
// first, and from there the run starts early reads as it did (carry.go).
// A record without Waiting continues with early reads off.
func (r *Runner) Continue(ctx context.Context, rec *Record, req Request) (*Output, error) {
	if err := r.replayable(rec); err != nil {
		return nil, err
	}
	if req.Source != "" || req.Stream != nil || req.Inputs != nil || req.Files != nil || req.Filename != "" {
		return nil, fmt.Errorf("%w: a continuation's program, inputs and files are its record's: the Request sets none", ErrBadRequest)
	}
	if diff := toolsDiffer(rec.RunTools, recordedTools(req.Tools)); diff != "" {
		return nil, fmt.Errorf("%w: the run's own tools are not the record's: %s", ErrBadRequest, diff)
	}
	if err := r.checkWaiting(rec.Waiting, req.Tools); err != nil {
		return nil, err
	}
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	p := newReplayer(rec, nil)
	p.live = true
	req.Source, req.Filename, req.Inputs, req.Files, req.EarlyReads = rec.Source, rec.Filename, rec.Inputs, rec.Files, rec.EarlyReads
	req.replay = p
	out, err := r.run(ctx, req, nil)
	if p.err != nil {
		return out, p.err
	}
	return out, err
}

// toolsDiffer names the first difference between a record's run tools and
// a continuation's, or "".
func toolsDiffer(recorded, given []RecordedTool) string {
	for i := 0; i < max(len(recorded), len(given)); i++ {
		switch { // both are sorted by name: the smaller name is the one missing
		case i >= len(given) || i < len(recorded) && recorded[i].Name < given[i].Name:
			return "the record has the tool " + recorded[i].Name + ", the Request does not"
		case i >= len(recorded) || recorded[i].Name != given[i].Name:
			return "the Request has the tool " + given[i].Name + ", the record does not"
		}
		a, b := recorded[i], given[i]
		if a.Description != b.Description || a.KeywordOnly != b.KeywordOnly || a.Early != b.Early ||
			!sameSchema(a.InputSchema, b.InputSchema) || !sameSchema(a.OutputSchema, b.OutputSchema) {
			return "the tool " + a.Name + " is declared otherwise than in the record"
		}
	}
	return ""
}

// sameSchema compares two schemas as JSON values; absent is absent.
func sameSchema(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return sameArgs(a, b)
}
