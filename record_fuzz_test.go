package spine

import (
	"testing"
)

// FuzzParseRecord: any bytes, compressed or not, give a record or an error
// matching ErrBadRequest; a record parsed encodes and parses again.
func FuzzParseRecord(f *testing.F) {
	rec := &Record{Version: RecordVersion, Source: "print(1)", Calls: []RecordedCall{{Tool: "lookup", Args: []byte(`{"key":"book"}`), Response: []byte(`{"value":21}`)}},
		Clock: RecordClock{Wall: []int64{1, 2}}, Random: []byte{1, 2, 3}}
	data, err := rec.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(append(append([]byte(nil), zstdMagic...), 0, 0, 0))
	f.Add([]byte(`{"spine_record": 2}`))
	f.Add([]byte(`{"spine_record": 1, "calls": [{"args": 5}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := ParseRecord(data)
		if err != nil {
			return
		}
		again, err := rec.Encode()
		if err != nil {
			t.Fatalf("a parsed record does not encode: %v", err)
		}
		if _, err := ParseRecord(again); err != nil {
			t.Fatalf("an encoded record does not parse: %v", err)
		}
	})
}
