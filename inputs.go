package spine

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkInputText refuses encoded inputs (valid JSON) that the Guest's json
// module could not decode: text that is not UTF-8, an integer too long for
// Python to convert. Either is the caller's mistake, an ErrBadRequest, found
// before the run rather than as the Guest's failure to read its request.
func checkInputText(encoded []byte) error {
	if !utf8.Valid(encoded) {
		return fmt.Errorf("%w: inputs are not valid UTF-8", ErrBadRequest)
	}
	if digits := longestInteger(encoded); digits > MaxInputDigits {
		return fmt.Errorf("%w: inputs hold an integer of %d digits, over the limit of %d (Python's, for converting text to int)", ErrBadRequest, digits, MaxInputDigits)
	}
	return nil
}

// MaxInputDigits is how many digits an integer in a Request's inputs may have:
// CPython's limit for converting text to int (sys.int_info.default_max_str_digits),
// past which the Guest's json module could not decode them.
const MaxInputDigits = 4300

// longestInteger returns the most digits of an integer in data (valid JSON):
// a number with neither fraction nor exponent, which Python decodes as int (the
// others become floats, which have no such limit).
func longestInteger(data []byte) int {
	longest, inString, escaped := 0, false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			start := i
			if c == '-' {
				start++
			}
			end := start
			for end < len(data) && data[end] >= '0' && data[end] <= '9' {
				end++
			}
			integer := end == len(data) || data[end] != '.' && data[end] != 'e' && data[end] != 'E'
			if integer && end-start > longest {
				longest = end - start
			}
			for end < len(data) && strings.IndexByte("0123456789.eE+-", data[end]) >= 0 {
				end++
			}
			i = end - 1
		}
	}
	return longest
}

// MaxInputDepth is how deeply a Request's inputs may nest arrays and objects
// (the inputs object itself is level 1). The Guest decodes inputs with
// CPython's json module, whose recursion limit stops it a little under 600
// levels; the Host refuses deeper inputs before the run.
const MaxInputDepth = 512

// jsonDepth returns how deeply data (valid JSON) nests arrays and objects, or
// limit+1 as soon as it is deeper than limit.
func jsonDepth(data []byte, limit int) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
