package main

import "testing"

// TestDemoToolsPositional: the demo tools take their arguments positionally
// and by keyword alike, as models write them (lookup("book")); None for
// prices.list's optional limit is no limit.
func TestDemoToolsPositional(t *testing.T) {
	for _, program := range []string{`lookup("book")`, `lookup(key="book")`} {
		spineCLI(t, program, "run", "--demo-tools", "-").check(t, 0, "21\n")
	}
	spineCLI(t, `[p["key"] for p in prices.list(1)] + [len(prices.list(limit=None))]`, "run", "--demo-tools", "-").
		check(t, 0, "[\n  \"pen\",\n  2\n]\n")
	spineCLI(t, `lookup("book", "pen")`, "run", "--demo-tools", "-").
		check(t, 1, "", "TypeError: lookup() takes 1 positional argument but 2 were given")
}
