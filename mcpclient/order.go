package mcpclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"

	"github.com/spine-run/spine"
)

// The SDK decodes a tool's schemas and a call's structuredContent into Go
// maps, which forget the order of their keys. That order matters: a tool's
// input-schema properties are the order in which a program may pass the
// tool's arguments positionally, and a result's keys are the order in which
// the program prints them. So the watch (tasks.go) keeps the schemas as the
// server wrote them, and the structured results of recent calls, which a
// call's value is then taken from.

// toolSchemas are a tool's input and output schemas as the server wrote them.
type toolSchemas struct{ input, output json.RawMessage }

// schemasOf returns the tool name's schemas as the server wrote them, if
// the watch saw them.
func (w *taskWatch) schemasOf(name string) (toolSchemas, bool) {
	if w == nil {
		return toolSchemas{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.schemas[name]
	return s, ok
}

// Bounds of the structured results kept for the calls that have not taken
// theirs yet (a call whose caller went away never does).
const (
	maxRecentResults = 64
	maxRecentBytes   = 16 << 20
)

// recentResults are structured results as written, oldest first, with the
// digest of their keys-sorted form, which is how a call finds its own.
type recentResults struct {
	items []recentResult
	bytes int
}

type recentResult struct {
	digest [sha256.Size]byte
	raw    json.RawMessage
}

// structured keeps the structuredContent of a tools/call answer's result.
func (w *taskWatch) structured(result json.RawMessage) {
	var r struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(result, &r) != nil || len(r.StructuredContent) == 0 || r.StructuredContent[0] != '{' {
		return
	}
	var v any
	if json.Unmarshal(r.StructuredContent, &v) != nil {
		return
	}
	digest, ok := sortedDigest(v)
	if !ok {
		return
	}
	raw := append(json.RawMessage(nil), r.StructuredContent...)
	w.mu.Lock()
	defer w.mu.Unlock()
	rr := &w.results
	rr.items = append(rr.items, recentResult{digest, raw})
	rr.bytes += len(raw)
	for len(rr.items) > maxRecentResults || rr.bytes > maxRecentBytes {
		rr.bytes -= len(rr.items[0].raw)
		rr.items = rr.items[1:]
	}
}

// ordered returns the structured result value as the server wrote it (its
// keys in the server's order), taking it from the recent ones; false when
// it is not there.
func (w *taskWatch) ordered(value any) (json.RawMessage, bool) {
	if w == nil {
		return nil, false
	}
	if _, ok := value.(map[string]any); !ok {
		return nil, false
	}
	digest, ok := sortedDigest(value)
	if !ok {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rr := &w.results
	for i, item := range rr.items {
		if item.digest == digest {
			rr.items = append(rr.items[:i:i], rr.items[i+1:]...)
			rr.bytes -= len(item.raw)
			return item.raw, true
		}
	}
	return nil, false
}

// sortedDigest is the digest of v encoded with its keys sorted, as Go
// encodes a map: the same for a result the SDK decoded and for the same
// result as the server wrote it.
func sortedDigest(v any) ([sha256.Size]byte, bool) {
	encoded, err := json.Marshal(v)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(encoded), true
}

// inOrder returns call, whose structured results (a JSON object) come back
// with their keys in the server's order when the watch saw them.
func inOrder(call spine.Tool, w *taskWatch) spine.Tool {
	if w == nil {
		return call
	}
	return func(ctx context.Context, args json.RawMessage) (any, error) {
		value, err := call(ctx, args)
		if err == nil {
			if raw, ok := w.ordered(value); ok {
				return raw, nil
			}
		}
		return value, err
	}
}

// isJSON reports whether raw holds one JSON value.
func isJSON(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) > 0 && json.Valid(raw)
}
