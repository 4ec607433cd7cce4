package spine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// ArgumentError is a tool's error for arguments that do not fit it: the
// program gets it as a TypeError raised at the call site, where every other
// tool error is a RuntimeError. NewTool's tools return it for arguments of
// the wrong shape; any Tool may return one (wrapped or not).
type ArgumentError struct {
	// Message says what is wrong, in the words of a Python TypeError
	// without the function's name, which the Host puts in front:
	// "argument 'key' must be str, not int".
	Message string
}

func (e *ArgumentError) Error() string { return e.Message }

// NewTool returns the ToolSpec of fn, a Go function with typed arguments and
// value, in the shape the official MCP Go SDK gives its typed tools:
//
//	type LookupIn struct {
//		Key string `json:"key" jsonschema:"the item, e.g. book"`
//	}
//	type Price struct {
//		Amount   float64 `json:"amount"`
//		Currency string  `json:"currency"`
//	}
//	m := spine.Manifest{"lookup": spine.NewTool("Look up the price of an item by key.",
//		func(ctx context.Context, in LookupIn) (Price, error) { ... })}
//
// InputSchema and OutputSchema are inferred from In and Out with
// github.com/google/jsonschema-go (jsonschema.For): a struct's fields are
// properties named by their json tags, required unless "omitempty" or
// "omitzero", described by their jsonschema tags; no other keys are allowed.
// So the tool's stub shows its parameters and its return type, and the
// Guest's proxy refuses unknown and missing keywords before the call. The
// parameters are the struct's fields, required ones first, each group in
// declaration order: a program may pass them positionally in that order or
// by keyword. Named struct types are the schemas' titles, so the stub's
// classes keep the Go names ([]Order is list[Order]).
//
// A call's arguments are decoded into In strictly: an unknown key, a value of
// the wrong type (a string for an int, null for a string, a missing key of a
// nested object) is an *ArgumentError, raised in the program as a TypeError
// that names the argument and the type it must have, and fn is not called.
// fn's value is the tool's value, encoded as JSON; a nil slice or map is an
// empty list or dict.
//
// In must be a struct, a pointer to one, or a map with string keys (every
// keyword then goes, as **kwargs); Out anything JSON can encode (any gives no
// OutputSchema). NewTool panics when a type has no JSON Schema (a channel, a
// func, a map with other keys, a cycle): that is a programmer error, found
// when the manifest is built. The returned spec may be changed before New:
// set AllowEarlyRead for a tool that only reads.
func NewTool[In, Out any](description string, fn func(ctx context.Context, in In) (Out, error)) ToolSpec {
	if fn == nil {
		panic("spine.NewTool: nil function")
	}
	inType := reflect.TypeFor[In]()
	base := inType
	if base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	if base.Kind() != reflect.Struct && !(base.Kind() == reflect.Map && base.Key().Kind() == reflect.String) {
		panic(fmt.Sprintf("spine.NewTool: the arguments' type %s is not a struct or a map with string keys: a tool takes keyword arguments", inType))
	}
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("spine.NewTool: the arguments' type %s: %v", inType, err))
	}
	// A pointer's schema also allows null; a tool's arguments are always an
	// object.
	if len(in.Types) > 0 {
		in.Type, in.Types = "object", nil
	}
	title := in.Title
	nameObjects(inType, in, 0)
	in.Title = title // the arguments object is no class of the stub
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("spine.NewTool: the arguments' type %s: %v", inType, err))
	}
	inputSchema, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("spine.NewTool: the arguments' type %s: %v", inType, err))
	}
	var outputSchema json.RawMessage
	outType := reflect.TypeFor[Out]()
	// A nil slice or map is the tool's value as an empty list or dict, so
	// that the value's type is never None for them.
	emptyForNil := outType.Kind() == reflect.Slice || outType.Kind() == reflect.Map
	if outType.Kind() != reflect.Interface {
		out, err := jsonschema.For[Out](nil)
		if err != nil {
			panic(fmt.Sprintf("spine.NewTool: the value's type %s: %v", outType, err))
		}
		if emptyForNil && len(out.Types) == 2 && out.Types[0] == "null" {
			out.Type, out.Types = out.Types[1], nil
		}
		nameObjects(outType, out, 0)
		if outputSchema, err = json.Marshal(out); err != nil {
			panic(fmt.Sprintf("spine.NewTool: the value's type %s: %v", outType, err))
		}
	}
	call := func(ctx context.Context, args json.RawMessage) (any, error) {
		in, err := decodeArguments[In](args, resolved)
		if err != nil {
			return nil, err
		}
		value, err := fn(ctx, in)
		if emptyForNil && err == nil {
			if v := reflect.ValueOf(&value).Elem(); v.IsNil() {
				if v.Kind() == reflect.Slice {
					v.Set(reflect.MakeSlice(v.Type(), 0, 0))
				} else {
					v.Set(reflect.MakeMap(v.Type()))
				}
			}
		}
		return value, err
	}
	return ToolSpec{Call: call, Description: description, InputSchema: inputSchema, OutputSchema: outputSchema}
}

// nameObjects titles each object schema in s made from a named Go struct type
// (of t, which s is the schema of) with the type's name, so that the class
// its stub shows is named after it: []Order is list[Order].
func nameObjects(t reflect.Type, s *jsonschema.Schema, depth int) {
	if s == nil || depth > maxTypeDepth*4 {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.Name() != "" && s.Title == "" && len(s.Properties) > 0 {
			s.Title = t.Name()
		}
		for _, f := range reflect.VisibleFields(t) {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if sub, ok := s.Properties[name]; ok {
				nameObjects(f.Type, sub, depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		nameObjects(t.Elem(), s.Items, depth+1)
	case reflect.Map:
		nameObjects(t.Elem(), s.AdditionalProperties, depth+1)
	}
}

// decodeArguments decodes a call's arguments into an In, strictly (see
// NewTool): unknown keys and values of the wrong type are an *ArgumentError.
func decodeArguments[In any](args json.RawMessage, schema *jsonschema.Resolved) (In, error) {
	var in In
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if err := validateArguments(args, schema); err != nil {
		return in, err
	}
	// Go's decoder checks what a schema cannot say (an integer too large
	// for its Go type).
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, argumentError(err, args)
	}
	return in, nil
}

// checkArguments says what is wrong with args, a call's arguments decoded
// with UseNumber, for the object schema s, in the words of a Python
// TypeError; "" when nothing is.
func checkArguments(s *jsonschema.Schema, args any) string {
	obj, ok := args.(map[string]any)
	if !ok {
		return "arguments must be a dict, not " + pythonValueType(args)
	}
	if closed(s) {
		for _, key := range sortedKeys(obj) {
			if _, ok := s.Properties[key]; !ok {
				return fmt.Sprintf("got an unexpected keyword argument '%s'", key)
			}
		}
	}
	var missing []string
	for _, key := range s.Required {
		if _, ok := obj[key]; !ok {
			missing = append(missing, "'"+key+"'")
		}
	}
	if len(missing) > 0 {
		plural := "argument"
		if len(missing) > 1 {
			plural = "arguments"
		}
		listed := strings.Join(missing, " and ")
		if len(missing) > 2 {
			listed = strings.Join(missing[:len(missing)-1], ", ") + ", and " + missing[len(missing)-1]
		}
		return fmt.Sprintf("missing %d required keyword-only %s: %s", len(missing), plural, listed)
	}
	for _, key := range sortedKeys(obj) {
		sub := s.Properties[key]
		if sub == nil {
			sub = s.AdditionalProperties
		}
		if message := checkValue(sub, obj[key], key, 0); message != "" {
			return message
		}
	}
	return ""
}

// checkValue checks the value v at path against s: its type, and for an
// object its keys, down to the bottom.
func checkValue(s *jsonschema.Schema, v any, path string, depth int) string {
	if s == nil || depth > 64 {
		return ""
	}
	types := s.Types
	if s.Type != "" {
		types = []string{s.Type}
	}
	if len(types) > 0 {
		kind := schemaKind(v)
		fits := false
		for _, t := range types {
			if t == kind || t == "number" && kind == "integer" {
				fits = true
			}
		}
		if !fits {
			var want []string
			for _, t := range types {
				if t != "null" {
					want = append(want, schemaPython[t])
				}
			}
			if len(want) < len(types) {
				want = append(want, "None")
			}
			return fmt.Sprintf("argument '%s' must be %s, not %s", path, strings.Join(want, " or "), pythonValueType(v))
		}
	}
	if message := checkBounds(s, v, path); message != "" {
		return message
	}
	switch v := v.(type) {
	case []any:
		for i, item := range v {
			if message := checkValue(s.Items, item, fmt.Sprintf("%s[%d]", path, i), depth+1); message != "" {
				return message
			}
		}
	case map[string]any:
		if closed(s) {
			for _, key := range sortedKeys(v) {
				if _, ok := s.Properties[key]; !ok {
					return fmt.Sprintf("argument '%s' has an unexpected key '%s'", path, key)
				}
			}
		}
		for _, key := range s.Required {
			if _, ok := v[key]; !ok {
				return fmt.Sprintf("argument '%s' is missing the key '%s'", path, key)
			}
		}
		for _, key := range sortedKeys(v) {
			sub := s.Properties[key]
			if sub == nil {
				sub = s.AdditionalProperties
			}
			if message := checkValue(sub, v[key], path+"."+key, depth+1); message != "" {
				return message
			}
		}
	}
	return ""
}

// closed reports whether s allows no keys beyond its properties
// (additionalProperties false, which jsonschema-go writes as {"not": {}}).
func closed(s *jsonschema.Schema) bool {
	return s.AdditionalProperties != nil && s.AdditionalProperties.Not != nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// schemaPython names the Python type of each JSON Schema type.
var schemaPython = map[string]string{"string": "str", "integer": "int", "number": "float", "boolean": "bool",
	"array": "list", "object": "dict", "null": "None"}

// schemaKind is the JSON Schema type of a value decoded with UseNumber.
func schemaKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if strings.ContainsAny(v.String(), ".eE") {
			return "number"
		}
		return "integer"
	case []any:
		return "array"
	}
	return "object"
}

// pythonValueType is the Python type of a value decoded with UseNumber.
func pythonValueType(v any) string { return schemaPython[schemaKind(v)] }

// argumentError says what in err, an error of decoding args, is wrong, in
// CPython's words for an argument of the wrong type.
func argumentError(err error, args json.RawMessage) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return &ArgumentError{Message: fmt.Sprintf("arguments must be a dict, not %s", jsonValueType(typeErr.Value, nil, false))}
		}
		value, found := lookupPath(args, typeErr.Field, typeErr.Value)
		return &ArgumentError{Message: fmt.Sprintf("argument '%s' must be %s, not %s",
			typeErr.Field, pythonType(typeErr.Type), jsonValueType(typeErr.Value, value, found))}
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &ArgumentError{Message: fmt.Sprintf("got an unexpected keyword argument '%s'", strings.Trim(field, `"`))}
	}
	return &ArgumentError{Message: "the arguments do not fit the tool's Go type"}
}

// lookupPath finds the value Go's decoder refused in args: at the dotted
// path of object keys, in any element of the arrays the path crosses (the
// decoder does not say which), the first of the JSON kind it reported.
func lookupPath(args json.RawMessage, path, kind string) (any, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil, false
	}
	values := []any{v}
	for _, key := range strings.Split(path, ".") {
		var next []any
		for len(values) > 0 && len(next) < 1<<16 {
			value := values[0]
			values = values[1:]
			switch value := value.(type) {
			case map[string]any:
				if found, ok := value[key]; ok {
					next = append(next, found)
				}
			case []any:
				values = append(values, value...)
			}
		}
		values = next
	}
	kind, _, _ = strings.Cut(kind, " ")
	for _, value := range values {
		if jsonKind(value) == kind {
			return value, true
		}
	}
	return nil, false
}

// jsonKind is the kind of a decoded JSON value in the words of
// json.UnmarshalTypeError's Value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

// jsonValueType is the Python type of the JSON value that did not fit: the
// value itself when it was found, else what Go's decoder says of it.
func jsonValueType(kind string, value any, found bool) string {
	if found {
		switch v := value.(type) {
		case nil:
			return "None"
		case bool:
			return "bool"
		case string:
			return "str"
		case json.Number:
			if strings.ContainsAny(v.String(), ".eE") {
				return "float"
			}
			return "int"
		case []any:
			return "list"
		case map[string]any:
			return "dict"
		}
	}
	switch {
	case kind == "string":
		return "str"
	case kind == "bool":
		return "bool"
	case kind == "array":
		return "list"
	case kind == "object":
		return "dict"
	case strings.HasPrefix(kind, "number "):
		if strings.ContainsAny(kind, ".eE") {
			return "float"
		}
		return "int"
	}
	return "a " + kind
}

// pythonType names the Python type a Go type decodes from.
func pythonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "str"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct:
		return "dict"
	case reflect.Pointer:
		return pythonType(t.Elem()) + " or None"
	}
	return t.String()
}
