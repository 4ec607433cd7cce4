package spine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// canonicalArgs re-encodes a tool call's arguments (one JSON value) as a tool
// decodes them, for Options.Approve to judge and the tool to get, the same
// bytes: every string with its escapes resolved and written with only the
// escapes JSON requires (text that is not valid UTF-8, a lone surrogate
// escape, become U+FFFD, as Go's decoder reads them), numbers as written,
// each object's keys in their order, no spaces. An object that repeats a key,
// which tools read in different ways, is refused. Empty args stay empty.
func canonicalArgs(args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return args, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	type container struct {
		object bool
		keys   map[string]struct{}
		n      int // members or elements written
		key    bool
	}
	var stack []container
	out := make([]byte, 0, len(args))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the arguments are not JSON: %v", err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			out = append(out, byte(d))
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.object && !top.key { // tok is a key
				key := tok.(string)
				if _, seen := top.keys[key]; seen {
					return nil, fmt.Errorf("the arguments repeat the key %s", strconv.Quote(key))
				}
				top.keys[key] = struct{}{}
				if top.n > 0 {
					out = append(out, ',')
				}
				out = appendString(out, key)
				out = append(out, ':')
				top.key, top.n = true, top.n+1
				continue
			}
			if top.object {
				top.key = false
			} else {
				if top.n > 0 {
					out = append(out, ',')
				}
				top.n++
			}
		} else if len(out) > 0 {
			return nil, errors.New("the arguments are more than one JSON value")
		}
		switch v := tok.(type) {
		case json.Delim:
			stack = append(stack, container{object: v == '{'})
			if v == '{' {
				stack[len(stack)-1].keys = map[string]struct{}{}
			}
			out = append(out, byte(v))
		case string:
			out = appendString(out, v)
		case json.Number:
			out = append(out, v...)
		case bool:
			out = strconv.AppendBool(out, v)
		case nil:
			out = append(out, "null"...)
		}
	}
	if len(stack) > 0 {
		return nil, errors.New("the arguments are not JSON: they end inside an object or array")
	}
	return out, nil
}

// appendString appends s as a JSON string with only the escapes JSON
// requires (the quote, the backslash and the control characters), short
// ones for newline, return and tab, as the Guest's encoder writes them.
func appendString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c == '\t':
			out = append(out, '\\', 't')
		case c < 0x20:
			out = append(out, `\u00`...)
			out = append(out, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		case c < utf8.RuneSelf:
			out = append(out, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			out = utf8.AppendRune(out, r) // U+FFFD for a byte that is not UTF-8
			i += size
			continue
		}
		i++
	}
	return append(out, '"')
}
