package main

import (
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// What a program prints is not trusted. Written to a terminal as it is, it
// could drive the terminal: move the cursor and overwrite lines, retitle the
// window, set the clipboard (OSC 52), ring the bell, or, with some terminals,
// make them answer as if typed. So spine run shows such characters instead of
// sending them, written as in a Python string's repr:
//
//   - ESC as \x1b, so every escape sequence (CSI, OSC, DCS, ...) loses its
//     introducer and prints as text;
//   - the other C0 controls as \x00 to \x1f, except \n and \t, and \r, shown
//     as \r unless a \n follows (a line ending that overwrites nothing);
//   - DEL and the C1 controls U+0080 to U+009F as \x7f to \x9f;
//   - a byte that is not part of valid UTF-8 as \xNN, since a terminal not
//     in UTF-8 mode reads 0x9b as CSI.
//
// Backslashes are left as they are, so the program's own "\x1b" text looks
// the same: the exact bytes are there with --raw, --json or a pipe.

// isTerminal reports whether w, a writer or a reader, is a terminal. One
// that is not a file may say so with an IsTerminal method (the tests'
// stand-ins do).
func isTerminal(w any) bool {
	switch w := w.(type) {
	case interface{ IsTerminal() bool }:
		return w.IsTerminal()
	case *os.File:
		return term.IsTerminal(int(w.Fd()))
	}
	return false
}

// terminalText returns s with the characters a terminal would obey written
// out visibly, as described above.
func terminalText(s string) string { return neutralize(s, false) }

// terminalJSON does the same for JSON text, with JSON's escapes (\u001b,
// \u009b; \ufffd for a byte that is not UTF-8), so that JSON stays JSON and
// its strings keep their values.
func terminalJSON(s string) string { return neutralize(s, true) }

func neutralize(s string, json bool) string {
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f || c == '\n' || c == '\t' {
			i++
			continue
		}
		if c == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i += 2
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				r = -1
			} else if r > 0x9f {
				i += size
				continue
			}
		}
		if done == 0 {
			b.Grow(len(s) + 16)
		}
		b.WriteString(s[done:i])
		code := byte(r) // a control: U+0000 to U+009F
		if r < 0 {
			code = c // a byte that is not UTF-8
		}
		switch {
		case json && r < 0:
			b.WriteString(`\ufffd`)
		case json:
			b.WriteString(`\u00`)
			b.WriteString(hex2(code))
		case r == '\r':
			b.WriteString(`\r`)
		default:
			b.WriteString(`\x`)
			b.WriteString(hex2(code))
		}
		i += size
		done = i
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}
