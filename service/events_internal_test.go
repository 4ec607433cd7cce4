package service

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzOutputEvents: whatever the program prints, cut anywhere, each event is
// one well-formed event whose data is one JSON string, and for valid UTF-8
// the strings put together are the output.
func FuzzOutputEvents(f *testing.F) {
	f.Add([]byte("first\n\r\nsecond\xc3\xa9"), uint8(3))
	f.Add([]byte("\xf0\x9f\x98\x80\x00\u2028\xff"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		n := int(step%7) + 1
		rec := httptest.NewRecorder()
		o := &output{events: startEvents(rec), name: "stdout"}
		for i := 0; i < len(data); i += n {
			o.Write(data[i:min(i+n, len(data))])
		}
		o.flush()
		var got strings.Builder
		for _, block := range strings.Split(rec.Body.String(), "\n\n") {
			if block == "" {
				continue
			}
			lines := strings.Split(block, "\n")
			if len(lines) != 2 || lines[0] != "event: stdout" || !strings.HasPrefix(lines[1], "data: ") {
				t.Fatalf("malformed event %q", block)
			}
			var s string
			if err := json.Unmarshal([]byte(lines[1][len("data: "):]), &s); err != nil {
				t.Fatalf("data %q: %v", lines[1], err)
			}
			got.WriteString(s)
		}
		if utf8.Valid(data) && got.String() != string(data) {
			t.Fatalf("events hold %q, the output was %q", got.String(), data)
		}
	})
}
