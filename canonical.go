package spine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// canonicalArgs re-encodes a tool call's arguments (one JSON value) as a tool
// decodes them, for Options.Approve to judge and the tool to get, the same
// bytes: every string with its escapes resolved and written with only the
// escapes JSON requires (text that is not valid UTF-8, a lone surrogate
// escape, become U+FFFD, as Go's decoder reads them), numbers as written,
// each object's keys in their order, no spaces. An object that repeats a key,
// which tools read in different ways, is refused; so is one with two keys
// that differ only in case ("key" and "KEY"): Go's encoding/json matches a
// struct's fields case-insensitively, so a tool decoding into a struct would
// take the value of one where a hook read the other. Empty args stay empty.
func canonicalArgs(args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return args, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	type container struct {
		object bool
		keys   map[string]string // folded (foldKey) to as written
		n      int               // members or elements written
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
				folded := foldKey(key)
				if first, seen := top.keys[folded]; seen {
					if first == key {
						return nil, fmt.Errorf("the arguments repeat the key %s", strconv.Quote(key))
					}
					return nil, fmt.Errorf("the arguments hold the keys %s and %s, which differ only in case", strconv.Quote(first), strconv.Quote(key))
				}
				top.keys[folded] = key
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
				stack[len(stack)-1].keys = map[string]string{}
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

// foldKey folds a key as Go's encoding/json does to match it to a struct's
// field: two keys have the same fold exactly when bytes.EqualFold holds
// (ASCII letters to upper case, every other rune to the smallest of its
// Unicode simple fold set, so "K", "k" and the Kelvin sign are one).
func foldKey(key string) string {
	out := make([]byte, 0, len(key))
	for _, r := range key {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			out = append(out, byte(r))
			continue
		}
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				r = next
				break
			}
			r = next
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}
