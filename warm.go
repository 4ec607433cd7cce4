package spine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/spine-run/spine/internal/engine"
)

// imageFormat changes whenever what an image holds changes meaning. An image
// has the scratch tree preopened at "/" and the working directory /work in
// wasi-libc's tables, and is captured with fixed randomness, so that every
// Host makes the same bytes under a key.
const imageFormat = "spine-image-4"

// imageKey names an image by everything that decides its bytes: the Guest
// (artifact identifies it), its world (the package archives and the warm-up
// that imports from them: world.digest) and the Runner's tools, which the
// image has installed.
func imageKey(artifact, world, tools []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(imageFormat), artifact, world, tools} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// warm runs the warm-up (warmup.Source, with the world's additions) in the Guest
// the image is taken from, installing the Runner's tools with it.
func (r *Runner) warm(ctx context.Context, g *engine.Instance) error {
	st := newRunState(r, ctx, false)
	defer st.close()
	request, err := json.Marshal(executeRequest{Source: r.world.warm, Inputs: json.RawMessage("{}"), Tools: r.tools})
	if err != nil {
		return err
	}
	response, err := g.Execute(st.ctx, request, maxErrorResponse)
	if err != nil {
		return err
	}
	if string(response) != `{"value":null}` {
		var failed struct {
			Error *struct {
				Type, Message string
				Line          int
			}
		}
		if json.Unmarshal(response, &failed) == nil && failed.Error != nil {
			if m, ok := r.world.preloads[failed.Error.Line]; ok {
				return &preloadError{module: m, typ: failed.Error.Type, message: failed.Error.Message}
			}
		}
		return fmt.Errorf("%w: %s", ErrGuest, response)
	}
	return nil
}
