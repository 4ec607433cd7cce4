package spine

import (
	"encoding/hex"
	"fmt"
)

// ImageKey names what a snapshot of this Runner's sessions can be restored
// by: a Runner of the same Guest artifact, tool list and Spine version has
// the same key, and only such a Runner restores them. It is hex, and the
// same as SnapshotImageKey of every snapshot the Runner takes. A fleet
// keeps it beside each stored snapshot, so that a replica of another build
// can refuse one without reading it (docs/scaling.md, "Version skew").
func (r *Runner) ImageKey() string {
	return hex.EncodeToString(r.identity.image[:])
}

// SnapshotImageKey returns the image key in a snapshot's header: the
// ImageKey of the Runner that took it. It checks only that blob starts as a
// snapshot does; Restore checks the rest.
func SnapshotImageKey(blob []byte) (string, error) {
	if len(blob) < snapshotHeaderSize || string(blob[:len(snapshotMagic)]) != snapshotMagic {
		return "", fmt.Errorf("%w: not a Spine snapshot", ErrSnapshot)
	}
	return hex.EncodeToString(blob[88:120]), nil
}
