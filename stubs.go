package spine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Stubs returns Python stub text for every tool of m, for a model's system
// prompt: valid Python that declares each tool's signature, types and
// documentation, and how to call it. Tools come in name order; the tools of a
// namespace ("market.get_price") are grouped as static methods of a class
// named after it, so the text shows the call as market.get_price(...):
//
//	from __future__ import annotations
//	from typing import Any, Literal
//
//	def lookup(*, key: str) -> Any:
//	    """Look up the price of an item by key.
//
//	    Args:
//	        key: the item, e.g. "book"
//	    """
//
//	class market:
//	    @staticmethod
//	    def get_price(*, symbol: str, currency: Literal["USD", "EUR"] = "USD") -> Any:
//	        """Return the last price of symbol."""
//
// Stub describes how a tool's schema becomes a signature.
func Stubs(m Manifest) string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("from __future__ import annotations\nfrom typing import Any, Literal\n")
	// open holds the namespaces (classes) the previous tool was written in.
	var open []string
	for _, name := range names {
		parts := strings.Split(name, ".")
		space := parts[:len(parts)-1]
		common := 0
		for common < len(open) && common < len(space) && open[common] == space[common] {
			common++
		}
		if common == 0 {
			b.WriteString("\n")
		}
		for depth := common; depth < len(space); depth++ {
			if depth > 0 && depth == common {
				b.WriteString("\n") // after the open class's previous member
			}
			fmt.Fprintf(&b, "%sclass %s:\n", indentOf(depth), space[depth])
		}
		if common > 0 && common == len(space) {
			b.WriteString("\n")
		}
		writeDef(&b, parts[len(parts)-1], m[name], len(space))
		open = space
	}
	return b.String()
}

// Stub returns the Python stub of one tool, as Stubs writes it: the
// tool's description is the docstring, followed by an "Args:" section with the
// description of each parameter that has one. help(tool) inside the Guest
// shows this text.
//
// The signature comes from spec.InputSchema, a JSON Schema object:
// every property is a keyword-only parameter (required ones first, then the
// rest, each group in the schema's order); an optional parameter shows its
// "default", or "= None" when it has none (leave it out to get the tool's
// default). Types: string→str, integer→int, number→float, boolean→bool,
// null→None, array→list[item type], object→dict[str, value type]; enum and
// const→Literal[...]; a list of types, anyOf or oneOf→X | Y, and a nullable
// schema→X | None; anything else→Any. A property whose name is not a Python
// identifier cannot be a keyword parameter: the signature gets **kwargs and
// the docstring lists it. Without a schema, or with one that is not of an
// object, the signature is (**kwargs); {"type": "object"} alone is (). The
// return type is Any. A dotted name is written as a class per namespace with
// the tool as a static method.
func Stub(name string, spec ToolSpec) string {
	var b strings.Builder
	parts := strings.Split(name, ".")
	for depth, space := range parts[:len(parts)-1] {
		fmt.Fprintf(&b, "%sclass %s:\n", indentOf(depth), space)
	}
	writeDef(&b, parts[len(parts)-1], spec, len(parts)-1)
	return b.String()
}

func indentOf(depth int) string { return strings.Repeat("    ", depth) }

// writeDef writes the def of one tool at the given depth: inside depth
// classes, as a static method.
func writeDef(b *strings.Builder, short string, spec ToolSpec, depth int) {
	in := indentOf(depth)
	if depth > 0 {
		b.WriteString(in + "@staticmethod\n")
	}
	params, docs := signature(spec.InputSchema)
	fmt.Fprintf(b, "%sdef %s(%s) -> Any:\n", in, short, params)
	body := in + "    "
	doc := strings.TrimSpace(strings.ReplaceAll(spec.Description, "\r\n", "\n"))
	if len(docs) > 0 {
		if doc != "" {
			doc += "\n\n"
		}
		doc += "Args:\n"
		for _, d := range docs {
			doc += "    " + d + "\n"
		}
	}
	if doc == "" {
		b.WriteString(body + "...\n")
		return
	}
	lines := strings.Split(strings.TrimRight(pyDocEscape(doc), "\n"), "\n")
	if len(lines) == 1 {
		line := lines[0]
		if strings.HasSuffix(line, `"`) {
			line = line[:len(line)-1] + `\"` // not part of the closing quotes
		}
		b.WriteString(body + `"""` + line + `"""` + "\n")
		return
	}
	b.WriteString(body + `"""`)
	for i, line := range lines {
		line = strings.TrimRight(line, " \t")
		if i > 0 && line != "" {
			b.WriteString(body)
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(body + `"""` + "\n")
}

// pyDocEscape makes text safe inside a """ docstring.
func pyDocEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return strings.ReplaceAll(s, `"""`, `\"\"\"`)
}

// schema is the part of JSON Schema a stub uses.
type schema struct {
	Type                 json.RawMessage   `json:"type"`
	Description          string            `json:"description"`
	Enum                 []json.RawMessage `json:"enum"`
	Const                json.RawMessage   `json:"const"`
	Default              json.RawMessage   `json:"default"`
	Items                json.RawMessage   `json:"items"`
	AdditionalProperties json.RawMessage   `json:"additionalProperties"`
	AnyOf                []json.RawMessage `json:"anyOf"`
	OneOf                []json.RawMessage `json:"oneOf"`
	Nullable             bool              `json:"nullable"`
	Required             []string          `json:"required"`
	Properties           orderedProps      `json:"properties"`
}

type property struct {
	name   string
	schema json.RawMessage
}

// orderedProps keeps the properties of a schema in the order written.
type orderedProps []property

func (p *orderedProps) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return nil // not an object: no properties
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if !seen[key] {
			seen[key] = true
			*p = append(*p, property{key, value})
		}
	}
	return nil
}

func parseSchema(raw json.RawMessage) (*schema, bool) {
	var s schema
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return &s, true
}

// signature returns the parameter list of a tool with input schema raw, and
// the "name: description" lines of its docstring.
func signature(raw json.RawMessage) (string, []string) {
	s, ok := parseSchema(raw)
	if !ok || (len(s.Properties) == 0 && strings.Trim(string(bytes.TrimSpace(s.Type)), `"`) != "object") {
		return "**kwargs", nil // no schema, or not one of an object
	}
	required := make(map[string]bool)
	for _, r := range s.Required {
		required[r] = true
	}
	var first, rest, docs, odd []string
	for _, prop := range s.Properties {
		ps, _ := parseSchema(prop.schema)
		if ps == nil {
			ps = &schema{}
		}
		typ := typeOf(ps, 0)
		var param string
		switch {
		case required[prop.name]:
			param = fmt.Sprintf("%s: %s", prop.name, typ)
		case len(ps.Default) > 0:
			param = fmt.Sprintf("%s: %s = %s", prop.name, typ, pyLiteral(ps.Default))
		default:
			param = fmt.Sprintf("%s: %s = None", prop.name, union(typ, "None"))
		}
		desc := strings.Join(strings.Fields(ps.Description), " ")
		if !isIdentifier(prop.name) || pythonKeywords[prop.name] {
			note := fmt.Sprintf("%s (%s", pyLiteral(mustJSON(prop.name)), typ)
			if !required[prop.name] {
				note += ", optional"
			}
			note += "): pass it as **{" + pyLiteral(mustJSON(prop.name)) + ": ...}"
			if desc != "" {
				note += "; " + desc
			}
			odd = append(odd, note)
			continue
		}
		if desc != "" {
			docs = append(docs, prop.name+": "+desc)
		}
		if required[prop.name] {
			first = append(first, param)
		} else {
			rest = append(rest, param)
		}
	}
	params := append(first, rest...)
	docs = append(docs, odd...)
	extra := ""
	if len(odd) > 0 {
		extra = "**kwargs: Any"
	} else if ap := bytes.TrimSpace(s.AdditionalProperties); len(ap) > 0 && string(ap) != "false" {
		if as, ok := parseSchema(ap); ok {
			extra = "**kwargs: " + typeOf(as, 0)
		} else {
			extra = "**kwargs: Any" // true
		}
	}
	if len(params) == 0 {
		return extra, docs
	}
	list := "*, " + strings.Join(params, ", ")
	if extra != "" {
		list += ", " + extra
	}
	return list, docs
}

func mustJSON(v any) json.RawMessage {
	encoded, _ := json.Marshal(v)
	return encoded
}

// maxTypeDepth bounds the nesting a stub spells out; deeper is Any.
const maxTypeDepth = 4

// typeOf is the Python type of a schema.
func typeOf(s *schema, depth int) string {
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
			members = append(members, typeOf(ss, depth+1))
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
		var members []string
		for _, name := range types {
			members = append(members, simpleType(s, name, depth))
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

func simpleType(s *schema, name string, depth int) string {
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
			item = typeOf(is, depth+1)
		}
		return "list[" + item + "]"
	case "object":
		value := "Any"
		if as, ok := parseSchema(s.AdditionalProperties); ok && len(s.Properties) == 0 {
			value = typeOf(as, depth+1)
		}
		return "dict[str, " + value + "]"
	}
	return "Any"
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
