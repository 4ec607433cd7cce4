package main

import (
	"io"
	"sync"
	"unicode/utf8"
)

// streamWriter is where spine run sends the program's stdout or stderr as
// it runs (spine.Request.Stdout, Stderr): through text (terminalText on a
// terminal, so that what a program prints cannot drive it). A chunk may end
// in the middle of a character or of "\r\n": that end is held back until the
// next chunk or flush, so that text sees what it would see in one piece.
type streamWriter struct {
	mu    sync.Mutex
	w     io.Writer
	text  func(string) string
	held  []byte
	wrote bool // anything written
	last  byte // the last byte written or held
}

func newStreamWriter(w io.Writer, text func(string) string) *streamWriter {
	return &streamWriter{w: w, text: text}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	s.wrote, s.last = true, p[len(p)-1]
	data := append(s.held, p...)
	keep := incompleteTail(data)
	s.held = append([]byte(nil), data[len(data)-keep:]...)
	if _, err := io.WriteString(s.w, s.text(string(data[:len(data)-keep]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes what is held back, and reports whether the output so far
// ends a line (or is empty).
func (s *streamWriter) flush() (lineEnded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) > 0 {
		io.WriteString(s.w, s.text(string(s.held)))
		s.held = nil
	}
	return !s.wrote || s.last == '\n'
}

// incompleteTail is how many bytes at the end of data may belong with the
// next chunk: a "\r" (a "\r\n" cut in two) or the start of a UTF-8 sequence
// not yet complete.
func incompleteTail(data []byte) int {
	if n := len(data); n > 0 && data[n-1] == '\r' {
		return 1
	}
	for i := 1; i < utf8.UTFMax && i <= len(data); i++ {
		c := data[len(data)-i]
		if c < utf8.RuneSelf {
			return 0 // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(data[len(data)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}
