package engine

import "testing"

// TestCaptureCut: output past the cap is dropped whole, even a short write
// that would fit in the room a cut rune left.
func TestCaptureCut(t *testing.T) {
	c := newCapture(6)
	c.Write([]byte("abcd"))
	c.Write([]byte("éé")) // 4 bytes: "é" fits, the second is cut
	c.Write([]byte("\n")) // would fit in the byte the cut rune left
	if got := c.String(); got != "abcdé" || !c.truncated {
		t.Fatalf("captured %q, truncated %v", got, c.truncated)
	}
}
