package spine

import (
	"bytes"
	"encoding/json"
	"strings"
)

// schema is the part of JSON Schema a stub uses.
type schema struct {
	Type                 json.RawMessage   `json:"type"`
	Title                string            `json:"title"`
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

// isObjectSchema reports whether s describes an object with named keys: it has
// properties, or its type is "object".
func isObjectSchema(s *schema) bool {
	return len(s.Properties) > 0 || strings.Trim(string(bytes.TrimSpace(s.Type)), `"`) == "object"
}

// additional reports whether an object schema takes keys beyond its
// properties: only when additionalProperties says so, true or a schema (then
// returned). Left out, it is taken as false: the stub, and the Guest's check
// of a call's keywords, follow the properties the schema names.
func additional(s *schema) (bool, *schema) {
	ap := bytes.TrimSpace(s.AdditionalProperties)
	if len(ap) == 0 || string(ap) == "false" {
		return false, nil
	}
	as, ok := parseSchema(ap)
	if !ok || string(ap) == "true" {
		return true, nil
	}
	return true, as
}

// keywordCheck is what a tool's proxy in the Guest checks of a call's
// arguments before the call, from its input schema: nil when any keywords go
// (no schema, or not an object schema). Names holds every property,
// Required those the call must give; Open, when additional properties are
// allowed, lets any other keyword by (as **kwargs does), the required ones
// still checked. Positional is the order in which arguments given
// positionally bind (the stub's signature's), or nil when KeywordOnly says
// why none may be. OmitNone are the optional parameters whose schema refuses
// null: None for one of them is the same as leaving it out, so the request
// has no such key.
type keywordCheck struct {
	Names       []string `json:"names"`
	Required    []string `json:"required"`
	Open        bool     `json:"open,omitempty"`
	Positional  []string `json:"positional"`
	KeywordOnly string   `json:"keyword_only,omitempty"`
	OmitNone    []string `json:"omit_none,omitempty"`
}

func checkOf(spec ToolSpec) *keywordCheck {
	s, list, ok := params(spec.InputSchema)
	if !ok {
		return nil
	}
	c := &keywordCheck{Names: []string{}, Required: []string{}, KeywordOnly: keywordOnlyWhy(spec)}
	c.Open, _ = additional(s)
	if c.KeywordOnly == "" {
		c.Positional = []string{}
	}
	named := make(map[string]bool)
	for _, p := range list {
		c.Names = append(c.Names, p.name)
		named[p.name] = true
		if p.required {
			c.Required = append(c.Required, p.name)
		}
		if !p.odd && c.Positional != nil {
			c.Positional = append(c.Positional, p.name)
		}
		if !p.required && !acceptsNull(p.schema, 0) {
			c.OmitNone = append(c.OmitNone, p.name)
		}
	}
	// A required key the properties do not describe is still a keyword the
	// call must give.
	for _, r := range s.Required {
		if !named[r] {
			named[r] = true
			c.Names = append(c.Names, r)
			c.Required = append(c.Required, r)
		}
	}
	return c
}

// acceptsNull reports whether a value of schema s may be null: its type says
// so, or it says nothing of types at all.
func acceptsNull(s *schema, depth int) bool {
	if s.Nullable || depth > maxTypeDepth {
		return true
	}
	if len(s.Const) > 0 {
		return string(bytes.TrimSpace(s.Const)) == "null"
	}
	if len(s.Enum) > 0 {
		for _, v := range s.Enum {
			if string(bytes.TrimSpace(v)) == "null" {
				return true
			}
		}
		return false
	}
	if members := append(append([]json.RawMessage{}, s.AnyOf...), s.OneOf...); len(members) > 0 {
		for _, m := range members {
			ms, ok := parseSchema(m)
			if !ok || acceptsNull(ms, depth+1) {
				return true
			}
		}
		return false
	}
	var types []string
	if err := json.Unmarshal(s.Type, &types); err != nil {
		var one string
		if json.Unmarshal(s.Type, &one) != nil {
			return len(s.Properties) == 0 // no type: anything goes, unless it has properties
		}
		types = []string{one}
	}
	for _, t := range types {
		if t == "null" {
			return true
		}
	}
	return len(types) == 0
}

func mustJSON(v any) json.RawMessage {
	encoded, _ := json.Marshal(v)
	return encoded
}
