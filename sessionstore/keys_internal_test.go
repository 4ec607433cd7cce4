package sessionstore

import (
	"strings"
	"testing"
)

// FuzzStoreKeys: the keys a listing reads back are hostile input (any
// writer of the bucket may put any key there). A generation or an owner
// index entry is read only from the one key that writes it, and whatever a
// key holds, what is read is a checked id, a generation that is not 0 and a
// size that is not negative.
func FuzzStoreKeys(f *testing.F) {
	owner := Owner("fuzz-token-0123456789")
	st := &store{root: sessionsRoot}
	prefix, key := st.prefix, st.key
	f.Add(entryKey(owner, "s-1", 7, 4096), "s-1", uint64(7), int64(4096))
	f.Add(ownerPrefix(owner)+"s/00000000000000000001-+5", "a_b", uint64(1<<63), int64(0))
	f.Add(ownerPrefix(owner)+"../00000000000000000001-5", "x", uint64(0), int64(-1))
	f.Add(prefix("s")+"0000000000000000000a", "s", uint64(18446744073709551615), int64(1))
	f.Fuzz(func(t *testing.T, k, id string, gen uint64, size int64) {
		if e, ok := parseEntry(owner, k); ok {
			if CheckID(e.id) != nil || e.gen == 0 || e.size < 0 {
				t.Fatalf("parseEntry(%q) = %+v", k, e)
			}
			if again := entryKey(owner, e.id, e.gen, e.size); again != k {
				t.Fatalf("parseEntry(%q) = %+v, which is written %q", k, e, again)
			}
		}
		if g, ok := parseGen(k); ok {
			if g == 0 || !strings.HasSuffix(key("s", g), "/"+k) {
				t.Fatalf("parseGen(%q) = %d, which is written %q", k, g, key("s", g))
			}
		}
		if CheckID(id) != nil || gen == 0 || size < 0 {
			return
		}
		e, ok := parseEntry(owner, entryKey(owner, id, gen, size))
		if !ok || e.id != id || e.gen != gen || e.size != size {
			t.Fatalf("entry %q %d %d read back as %+v, %v", id, gen, size, e, ok)
		}
		if g, ok := parseGen(strings.TrimPrefix(key(id, gen), prefix(id))); !ok || g != gen {
			t.Fatalf("generation %d of %q read back as %d, %v", gen, id, g, ok)
		}
		if _, ok := parseEntry(Owner("another-token-0123456789"), entryKey(owner, id, gen, size)); ok {
			t.Fatalf("another owner reads %q as its own", entryKey(owner, id, gen, size))
		}
	})
}
