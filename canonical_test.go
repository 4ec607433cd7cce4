package spine

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// White-box tests of the arguments' canonical form (canonical.go), which
// Options.Approve judges and the tool gets (approve_canonical_test.go).

// FuzzCanonicalArgs: canonical arguments are JSON that decodes to what the
// original decodes to, and are their own canonical form.
func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":"\u0064\n\ud800"}`, `[1, {"b": [true, false, null]}, "x\"y"]`, `{"a":1,"a":2}`, "\"\xff\"", `{} {}`, `1e5`, ` "\u2028<>&" `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := canonicalArgs(data)
		if err != nil {
			return
		}
		if len(bytes.TrimSpace(data)) == 0 { // no arguments: left as they are
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q gave %q, not JSON", data, out)
		}
		var x, y any
		if json.Unmarshal(data, &x) == nil {
			if err := json.Unmarshal(out, &y); err != nil || !reflect.DeepEqual(x, y) {
				t.Fatalf("%q gave %q: %v", data, out, err)
			}
		}
		again, err := canonicalArgs(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("%q gave %q, then %q (%v)", data, out, again, err)
		}
	})
}

// TestFoldKey: two keys fold alike exactly when Go's encoding/json would
// take one for the other (bytes.EqualFold).
func TestFoldKey(t *testing.T) {
	keys := []string{"key", "KEY", "Key", "\u212aey", "kEy", "keys", "k", "K", "\u212a", "s", "S", "\u017f", "é", "É", "straße", "STRASSE", "ß", "ẞ", "", "σ", "Σ", "ς"}
	for _, a := range keys {
		for _, b := range keys {
			if same, fold := bytes.EqualFold([]byte(a), []byte(b)), foldKey(a) == foldKey(b); same != fold {
				t.Errorf("%q and %q: EqualFold %v, foldKey alike %v", a, b, same, fold)
			}
		}
	}
}
