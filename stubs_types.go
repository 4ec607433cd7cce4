package spine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// maxTypeDepth bounds the nesting a stub spells out; deeper is Any.
const maxTypeDepth = 4

// hint is what a TypedDict class made for a schema may be named after, best
// first: the schema's title, else base.
type hint struct {
	base string
	own  bool // the class is the value of one tool, never shared with another
}

// propertyHint names the class of the property prop's schema: prop itself,
// and, for the items of an array, its singular.
func propertyHint(prop string) hint { return hint{base: camel(prop)} }

// typeOf is the Python type of a schema; h names the class an object schema
// becomes.
func (w *stubWriter) typeOf(s *schema, depth int, h hint) string {
	if depth > maxTypeDepth {
		return "Any"
	}
	var t string
	switch {
	case len(s.Const) > 0:
		t = literal([]json.RawMessage{s.Const})
	case len(s.Enum) > 0:
		t = literal(s.Enum)
	case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
		var members []string
		for _, sub := range append(append([]json.RawMessage{}, s.AnyOf...), s.OneOf...) {
			ss, ok := parseSchema(sub)
			if !ok {
				ss = &schema{}
			}
			members = append(members, w.typeOf(ss, depth+1, h))
		}
		t = union(members...)
	default:
		var types []string
		if err := json.Unmarshal(s.Type, &types); err != nil {
			var one string
			if json.Unmarshal(s.Type, &one) == nil {
				types = []string{one}
			}
		}
		if len(types) == 0 && len(s.Properties) > 0 {
			types = []string{"object"}
		}
		var members []string
		for _, name := range types {
			members = append(members, w.simpleType(s, name, depth, h))
		}
		if len(members) == 0 {
			members = []string{"Any"}
		}
		t = union(members...)
	}
	if s.Nullable {
		t = union(t, "None")
	}
	return t
}

func (w *stubWriter) simpleType(s *schema, name string, depth int, h hint) string {
	switch name {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "null":
		return "None"
	case "array":
		item := "Any"
		if is, ok := parseSchema(s.Items); ok {
			item = w.typeOf(is, depth+1, hint{base: singular(h.base)})
		}
		return "list[" + item + "]"
	case "object":
		if len(s.Properties) > 0 && depth < maxTypeDepth {
			return w.class(s, depth, h)
		}
		value := "Any"
		if as, ok := parseSchema(s.AdditionalProperties); ok && len(s.Properties) == 0 {
			value = w.typeOf(as, depth+1, hint{base: h.base + "Value"})
		}
		return "dict[str, " + value + "]"
	}
	return "Any"
}

// class returns the name of the TypedDict class of the object schema s,
// writing the class the first time one with its fields is needed.
func (w *stubWriter) class(s *schema, depth int, h hint) string {
	required := make(map[string]bool)
	for _, r := range s.Required {
		required[r] = true
	}
	// Keys that are not identifiers need TypedDict("Name", {...}); so do
	// keys starting with "__", which a class body would mangle.
	functional := false
	for _, prop := range s.Properties {
		if !isIdentifier(prop.name) || pythonKeywords[prop.name] || strings.HasPrefix(prop.name, "__") {
			functional = true
		}
	}
	total := len(s.Required) > 0
	var fields []string
	for _, prop := range s.Properties {
		ps, _ := parseSchema(prop.schema)
		if ps == nil {
			ps = &schema{}
		}
		typ := w.typeOf(ps, depth+1, propertyHint(prop.name))
		if total && !required[prop.name] {
			typ = "NotRequired[" + typ + "]"
		}
		key := prop.name
		if functional {
			key = pyLiteral(mustJSON(prop.name))
		}
		field := key + ": " + typ
		if functional {
			field += ","
		}
		comment := oneLine(ps.Description)
		if len(ps.Default) > 0 {
			if comment == "" {
				comment = "default: " + pyLiteral(ps.Default)
			} else {
				comment += " (default: " + pyLiteral(ps.Default) + ")"
			}
		}
		if comment != "" {
			field += "  # " + comment
		}
		fields = append(fields, field)
	}
	doc := strings.TrimSpace(strings.ReplaceAll(s.Description, "\r\n", "\n"))
	// Schemas that make the same class are one class, wherever they are used
	// (a server's input and output schemas differ in details a stub does not show).
	key := fmt.Sprint(functional, total, doc, fields)
	if h.own {
		key = h.base + " " + key
	}
	if name, ok := w.byBody[key]; ok {
		return name
	}
	name := w.className(s, h)
	w.byBody[key] = name
	w.taken[name] = true
	var b strings.Builder
	if functional {
		fmt.Fprintf(&b, "%s = TypedDict(%q, {\n", name, name)
		for _, f := range fields {
			b.WriteString("    " + f + "\n")
		}
		if total {
			b.WriteString("})\n")
		} else {
			b.WriteString("}, total=False)\n")
		}
		if doc != "" {
			// The functional form has no place for a docstring.
			for _, line := range strings.Split(doc, "\n") {
				b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
			}
		}
	} else {
		if total {
			fmt.Fprintf(&b, "class %s(TypedDict):\n", name)
		} else {
			fmt.Fprintf(&b, "class %s(TypedDict, total=False):\n", name)
		}
		if doc != "" {
			writeDocstring(&b, "    ", doc)
		}
		for _, f := range fields {
			b.WriteString("    " + f + "\n")
		}
	}
	w.classes = append(w.classes, b.String())
	return name
}

// className picks the name of a new class: the schema's title, or that
// with the tool's short then full name in front; else the same with h's base;
// else the last of those with a number.
func (w *stubWriter) className(s *schema, h hint) string {
	short := camel(w.tool[strings.LastIndex(w.tool, ".")+1:])
	full := camel(w.tool)
	base := h.base
	if base == "" {
		base = "Object"
	}
	var candidates []string
	for _, name := range []string{camel(s.Title), base} {
		if name != "" {
			candidates = append(candidates, name, short+name, full+name)
		}
	}
	for _, c := range candidates {
		if !w.classNameTaken(c) {
			return c
		}
	}
	last := candidates[len(candidates)-1]
	for n := 2; ; n++ {
		if c := fmt.Sprintf("%s%d", last, n); !w.classNameTaken(c) {
			return c
		}
	}
}

// camel makes s a CamelCase identifier: "entity_type", "entity-type" and
// "entityType" become EntityType; "" stays "". One starting with a digit gets
// a "T" in front.
func camel(s string) string {
	var b strings.Builder
	upper := true
	for _, c := range s {
		switch {
		case c < 128 && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'):
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			if b.Len() == 0 && '0' <= c && c <= '9' {
				b.WriteByte('T')
			}
			b.WriteRune(c)
			upper = false
		default:
			upper = true
		}
	}
	return b.String()
}

// singular names the items of an array named plural: Entities→Entity,
// Edits→Edit, Matches→Match; a name that does not end in s gets "Item".
func singular(plural string) string {
	switch {
	case plural == "":
		return "Item"
	case strings.HasSuffix(plural, "ies") && len(plural) > 3:
		return plural[:len(plural)-3] + "y"
	case strings.HasSuffix(plural, "sses"), strings.HasSuffix(plural, "shes"),
		strings.HasSuffix(plural, "ches"), strings.HasSuffix(plural, "xes"):
		return plural[:len(plural)-2]
	case strings.HasSuffix(plural, "s") && !strings.HasSuffix(plural, "ss") && len(plural) > 1:
		return plural[:len(plural)-1]
	}
	return plural + "Item"
}

// union joins types with " | ", without repeats, None last; Any absorbs all.
func union(types ...string) string {
	var out []string
	seen := make(map[string]bool)
	none := false
	for _, t := range types {
		for _, member := range splitUnion(t) {
			switch {
			case member == "Any":
				return "Any"
			case member == "None":
				none = true
			case !seen[member]:
				seen[member] = true
				out = append(out, member)
			}
		}
	}
	if none {
		out = append(out, "None")
	}
	return strings.Join(out, " | ")
}

// splitUnion splits "A | B" at its top level (not inside brackets).
func splitUnion(t string) []string {
	var parts []string
	depth, start := 0, 0
	inString := byte(0)
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case inString != 0:
			if c == '\\' {
				i++
			} else if c == inString {
				inString = 0
			}
		case c == '"' || c == '\'':
			inString = c
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '|' && depth == 0:
			parts = append(parts, strings.TrimSpace(t[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(t[start:]))
}

// literal is Literal[...] of JSON values; a null among them is "| None".
func literal(values []json.RawMessage) string {
	var members []string
	none := false
	for _, v := range values {
		if string(bytes.TrimSpace(v)) == "null" {
			none = true
			continue
		}
		members = append(members, pyLiteral(v))
	}
	t := ""
	if len(members) > 0 {
		t = "Literal[" + strings.Join(members, ", ") + "]"
	}
	if none {
		if t == "" {
			return "None"
		}
		t += " | None"
	}
	return t
}

// pyLiteral writes a JSON value as a Python literal: JSON's string escapes are
// Python's too; true, false and null become True, False and None.
func pyLiteral(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "..."
	}
	var b strings.Builder
	writeLiteral(&b, v)
	return b.String()
}

func writeLiteral(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case json.Number:
		b.WriteString(v.String())
	case string:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
		b.WriteString(strings.TrimSuffix(buf.String(), "\n"))
	case []any:
		b.WriteString("[")
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeLiteral(b, e)
		}
		b.WriteString("]")
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeLiteral(b, k)
			b.WriteString(": ")
			writeLiteral(b, v[k])
		}
		b.WriteString("}")
	}
}
