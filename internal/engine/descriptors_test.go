package engine

import (
	"testing"

	"github.com/spine-run/spine/internal/scratch"
)

// TestDescriptorChecks: the Host's answers before fd_close, fd_renumber and
// path_open, and what they do to the Guest's standing.
func TestDescriptorChecks(t *testing.T) {
	d := newDescriptors(nil, scratch.Limits{}, 5, true)
	d.ready()
	if d.beforeRenumber(5, 7) != wasiErrnoSuccess || d.beforeClose(8) != wasiErrnoSuccess || !d.intact() {
		t.Fatal("the program's own descriptors are its to move and close")
	}
	if d.beforeRenumber(5, 5+5) != wasiErrnoBADF || d.beforeRenumber(5, -1) != wasiErrnoBADF {
		t.Fatal("a target past what a run may hold is allowed")
	}
	for _, c := range []struct {
		name  string
		touch func(*descriptors)
	}{
		{"close stdout", func(d *descriptors) { d.beforeClose(1) }},
		{"close the preopen", func(d *descriptors) { d.beforeClose(3) }},
		{"close the scratch preopen", func(d *descriptors) { d.beforeClose(4) }},
		{"renumber onto stdout", func(d *descriptors) { d.beforeRenumber(5, 1) }},
		{"renumber stdin away", func(d *descriptors) { d.beforeRenumber(0, 7) }},
	} {
		d := newDescriptors(nil, scratch.Limits{}, 5, true)
		d.ready()
		c.touch(d)
		if d.intact() {
			t.Errorf("%s: the Guest still counts as intact", c.name)
		}
	}
	d = newDescriptors(nil, scratch.Limits{}, 2, true)
	d.ready()
	d.open.Add(2)
	if d.beforeOpen() != wasiErrnoMFILE {
		t.Fatal("a third descriptor is allowed past a limit of 2")
	}
	if unwatched := newDescriptors(nil, scratch.Limits{}, 5, false); unwatched.intact() {
		t.Fatal("a Guest without the checks counts as intact")
	}
}
