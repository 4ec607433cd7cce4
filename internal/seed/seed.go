// Package seed holds what `spine demo` and `spine bench` share: the seed
// demo's tool, lookup, its prices, and how both print a program.
package seed

import (
	"context"
	"encoding/json"
	"fmt"
)

// Prices are lookup's data.
var Prices = map[string]int{"book": 21, "pen": 2}

// Lookup is the seed demo's tool: the price of an item by key.
func Lookup(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("lookup: bad arguments: %v", err)
	}
	price, ok := Prices[a.Key]
	if !ok {
		return nil, fmt.Errorf("no such key: %q", a.Key)
	}
	return price, nil
}

// Indent puts four spaces before every line of s.
func Indent(s string) string {
	var b []byte
	start := true
	for i := 0; i < len(s); i++ {
		if start {
			b = append(b, "    "...)
		}
		b = append(b, s[i])
		start = s[i] == '\n'
	}
	return string(b)
}
