package spine

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkInputText refuses encoded inputs (valid JSON) that the Guest's json
// module could not decode: nesting past MaxInputDepth, text that is not UTF-8,
// an integer too long for Python to convert. Each is the caller's mistake, an
// ErrBadRequest, found before the run rather than as the Guest's failure to
// read its request.
func checkInputText(encoded []byte) error {
	depth, digits := scanJSON(encoded)
	switch {
	case depth > MaxInputDepth:
		return fmt.Errorf("%w: inputs nest more than %d levels deep, over the limit of %d", ErrBadRequest, MaxInputDepth, MaxInputDepth)
	case !utf8.Valid(encoded):
		return fmt.Errorf("%w: inputs are not valid UTF-8", ErrBadRequest)
	case digits > MaxInputDigits:
		return fmt.Errorf("%w: inputs hold an integer of %d digits, over the limit of %d (Python's, for converting text to int)", ErrBadRequest, digits, MaxInputDigits)
	}
	return nil
}

// MaxInputDigits is how many digits an integer in a Request's inputs may have:
// CPython's limit for converting text to int (sys.int_info.default_max_str_digits),
// past which the Guest's json module could not decode them.
const MaxInputDigits = 4300

// MaxInputDepth is how deeply a Request's inputs may nest arrays and objects
// (the inputs object itself is level 1). The Guest decodes inputs with
// CPython's json module, whose recursion limit stops it a little under 600
// levels; the Host refuses deeper inputs before the run.
const MaxInputDepth = 512

// scanJSON reads data (valid JSON) once and returns how deeply it nests
// arrays and objects, and the most digits of an integer in it: a number with
// neither fraction nor exponent, which Python decodes as int (the others
// become floats, which have no such limit).
func scanJSON(data []byte) (deepest, longest int) {
	depth, inString, escaped := 0, false, false
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
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
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
	return deepest, longest
}
