package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spine-run/spine/internal/engine"
)

// streamChunk is the most a single Read of Request.Stream delivers to the Guest.
const streamChunk = 32 << 10

// readStream runs prefix mode on inst: it hands the Guest each chunk of the
// program as it arrives (prefix_begin, prefix_feed), so early reads start while
// the program is still being written, and returns the whole source at the end
// of the stream. ctx ending stops it (and closes stream if it can be closed).
func (r *Runner) readStream(ctx context.Context, inst *engine.Instance, stream io.Reader, inputs json.RawMessage, extra guestRunTools, session bool) (string, error) {
	begin, err := json.Marshal(prefixBeginRequest{Inputs: inputs, Tools: r.requestTools(), ExtraTools: extra.whole, EarlyReads: true, Session: session})
	if err != nil {
		return "", err
	}
	if _, err := inst.PrefixBegin(ctx, begin); err != nil {
		return "", err
	}

	type chunk = streamChunkRead
	chunks := make(chan chunk)
	done := make(chan struct{})
	defer close(done)
	go func() { // the reader: only it calls stream.Read
		buf := make([]byte, streamChunk)
		for {
			n, err := stream.Read(buf)
			select {
			case chunks <- chunk{append([]byte(nil), buf[:n]...), err}: // tokens are small: copy what came
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var source []byte
	for {
		var c chunk
		select {
		case c = <-chunks:
		case <-ctx.Done(): // run closes the stream
			return "", ctx.Err()
		}
		if len(c.data) > 0 {
			if len(source)+len(c.data) > r.opts.MaxSource {
				// No byte past the limit reaches the Guest; the rest of the stream is
				// read and counted, so the error is the one the whole source gets.
				return "", drainStream(ctx, chunks, len(source)+len(c.data), r.opts.MaxSource, c.err)
			}
			source = append(source, c.data...)
			if _, err := inst.PrefixFeed(ctx, c.data); err != nil {
				return "", err
			}
		}
		if errors.Is(c.err, io.EOF) {
			return string(source), nil
		}
		if c.err != nil {
			return "", &streamReadError{c.err}
		}
	}
}

// drainStream reads what is left of a stream that is over limit (MaxSource),
// without keeping it, and returns the error Run gives that source sent whole;
// size is what came so far, err the last chunk's error.
func drainStream(ctx context.Context, chunks <-chan streamChunkRead, size, limit int, err error) error {
	for err == nil {
		select {
		case c := <-chunks:
			size += len(c.data)
			err = c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !errors.Is(err, io.EOF) {
		return &streamReadError{err}
	}
	return sourceTooLarge(size, limit)
}

// sourceTooLarge is the error for a source of size bytes over limit.
func sourceTooLarge(size, limit int) error {
	return fmt.Errorf("%w: source is %d bytes, over the %d-byte limit", ErrTooLarge, size, limit)
}

// streamChunkRead is one Read of Request.Stream.
type streamChunkRead struct {
	data []byte
	err  error
}

// streamReadError is a failure of Request.Stream itself, not of the Guest.
type streamReadError struct{ err error }

func (e *streamReadError) Error() string { return "spine: reading the program: " + e.err.Error() }
func (e *streamReadError) Unwrap() error { return e.err }
