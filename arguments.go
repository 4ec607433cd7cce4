package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// ValidateArguments returns spec with a Call that checks each call's
// arguments against spec.InputSchema before it calls spec.Call, as NewTool's
// tools do: arguments that do not fit (an unknown key where the schema allows
// none, a missing required key, a value of the wrong type or outside the
// schema's bounds, at any depth) are an *ArgumentError, which the program
// gets as a TypeError naming the argument in CPython's words
// ("search() argument 'limit' must be int, not str"), and spec.Call is not
// called. So every tool with a schema answers the same mistake with the same
// error, whatever it calls. mcpclient's tools are made this way.
//
// A spec without InputSchema is returned unchanged. An InputSchema that is
// not a JSON Schema, or one that cannot be resolved (a $ref to another
// document), is an error.
func ValidateArguments(spec ToolSpec) (ToolSpec, error) {
	if len(bytes.TrimSpace(spec.InputSchema)) == 0 {
		return spec, nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(spec.InputSchema, &s); err != nil {
		return spec, fmt.Errorf("spine: input schema: %w", err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return spec, fmt.Errorf("spine: input schema: %w", err)
	}
	call := spec.Call
	spec.Call = func(ctx context.Context, args json.RawMessage) (any, error) {
		if err := validateArguments(args, resolved); err != nil {
			return nil, err
		}
		return call(ctx, args)
	}
	return spec, nil
}

// validateArguments checks args against schema: first in checkArguments'
// words, then with the schema's validator for what those do not cover.
func validateArguments(args json.RawMessage, schema *jsonschema.Resolved) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	var instance any
	numbers := json.NewDecoder(bytes.NewReader(args))
	numbers.UseNumber()
	if err := numbers.Decode(&instance); err != nil || numbers.More() {
		return &ArgumentError{Message: "arguments are not one JSON object"}
	}
	if message := checkArguments(schema.Schema(), instance); message != "" {
		return &ArgumentError{Message: message}
	}
	instance = nil
	if err := json.Unmarshal(args, &instance); err != nil {
		return &ArgumentError{Message: "arguments are not one JSON object"}
	}
	if err := schema.Validate(instance); err != nil {
		return &ArgumentError{Message: validatorMessage(err.Error())}
	}
	return nil
}

// validatorMessage says which argument the schema's validator refused, from
// its error text ("validating root: validating /properties/o: validating
// /properties/o/properties/x: pattern: ..."): the deepest path of properties
// it names, and the keyword that refused it.
func validatorMessage(text string) string {
	path := ""
	keyword := ""
	for _, part := range strings.Split(text, ": ") {
		if rest, ok := strings.CutPrefix(part, "validating "); ok {
			if rest != "root" {
				path = rest
			}
			continue
		}
		if keyword == "" && isIdentifier(part) {
			keyword = part
		}
	}
	var names []string
	segments := strings.Split(path, "/")
	for i := 0; i+1 < len(segments); i++ {
		if segments[i] == "properties" {
			names = append(names, segments[i+1])
			i++
		}
	}
	what := "the arguments do not"
	if len(names) > 0 {
		what = fmt.Sprintf("argument '%s' does not", strings.Join(names, "."))
	}
	if keyword == "" {
		return what + " fit the tool's schema"
	}
	return fmt.Sprintf("%s fit the tool's schema (its %q)", what, keyword)
}

// checkBounds says what is wrong with v, a value at path decoded with
// UseNumber and of a type s allows, for the bounds of s (enum, const,
// minimum and maximum, lengths, item counts; a pattern is left to the
// validator), in the words of a Python TypeError; "" when nothing is.
func checkBounds(s *jsonschema.Schema, v any, path string) string {
	if len(s.Enum) > 0 {
		for _, e := range s.Enum {
			if sameJSON(e, v) {
				return ""
			}
		}
		var listed []string
		for _, e := range s.Enum {
			listed = append(listed, pyRepr(e))
		}
		return fmt.Sprintf("argument '%s' must be one of %s, not %s", path, strings.Join(listed, ", "), pyRepr(v))
	}
	if s.Const != nil && !sameJSON(*s.Const, v) {
		return fmt.Sprintf("argument '%s' must be %s, not %s", path, pyRepr(*s.Const), pyRepr(v))
	}
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return ""
		}
		for _, b := range []struct {
			bound *float64
			op    string
			ok    func(x, b float64) bool
		}{
			{s.Minimum, ">=", func(x, b float64) bool { return x >= b }},
			{s.Maximum, "<=", func(x, b float64) bool { return x <= b }},
			{s.ExclusiveMinimum, ">", func(x, b float64) bool { return x > b }},
			{s.ExclusiveMaximum, "<", func(x, b float64) bool { return x < b }},
		} {
			if b.bound != nil && !b.ok(f, *b.bound) {
				return fmt.Sprintf("argument '%s' must be %s %s, not %s", path, b.op, formatBound(*b.bound), v)
			}
		}
	case string:
		n := utf8.RuneCountInString(v)
		if s.MinLength != nil && n < *s.MinLength {
			return fmt.Sprintf("argument '%s' must have at least %s, not %d", path, plural(*s.MinLength, "character"), n)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return fmt.Sprintf("argument '%s' must have at most %s, not %d", path, plural(*s.MaxLength, "character"), n)
		}
	case []any:
		if s.MinItems != nil && len(v) < *s.MinItems {
			return fmt.Sprintf("argument '%s' must have at least %s, not %d", path, plural(*s.MinItems, "item"), len(v))
		}
		if s.MaxItems != nil && len(v) > *s.MaxItems {
			return fmt.Sprintf("argument '%s' must have at most %s, not %d", path, plural(*s.MaxItems, "item"), len(v))
		}
	}
	return ""
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func formatBound(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// sameJSON reports whether a (a value of a schema) and b (decoded with
// UseNumber) are the same JSON value.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var xv, yv any
	if json.Unmarshal(x, &xv) != nil || json.Unmarshal(y, &yv) != nil {
		return false
	}
	xs, _ := json.Marshal(xv)
	ys, _ := json.Marshal(yv)
	return bytes.Equal(xs, ys)
}

// pyRepr writes a JSON value as Python's repr writes it, near enough for an
// error message: strings in single quotes, None, True, False.
func pyRepr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		if len(v) > 80 {
			v = v[:77] + "..."
		}
		quoted := strconv.Quote(v)
		quoted = strings.ReplaceAll(quoted[1:len(quoted)-1], `\"`, `"`)
		return "'" + strings.ReplaceAll(quoted, "'", `\'`) + "'"
	case json.Number:
		return v.String()
	case float64:
		return formatBound(v)
	case []any:
		return "a list"
	case map[string]any:
		return "a dict"
	}
	return fmt.Sprint(v)
}
