package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/spine-run/spine"
)

// lookup is the tool of the examples: the price of an item by key.
func lookup(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	prices := map[string]int{"book": 21, "pen": 2}
	if p, ok := prices[a.Key]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no such key: %q", a.Key)
}

// The seed's program: Python calls the Go tool lookup, catches the error of
// an unknown key, and multiplies the price by an input.
func Example() {
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{
		"lookup": {Call: lookup, Description: "Look up a price by key."},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	out, err := r.Run(ctx, spine.Request{
		Source: `
price = lookup(key="book")
print("lookup(key='book') ->", price)
try:
    lookup(key="unicorn")
except RuntimeError as e:
    print("lookup(key='unicorn') -> RuntimeError:", e)
result = price * inputs["quantity"]
`,
		Inputs: map[string]any{"quantity": 3},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(out.Stdout)
	fmt.Println("result:", string(out.Value))
	fmt.Println("tool calls:", out.ToolCalls)
	// Output:
	// lookup(key='book') -> 21
	// lookup(key='unicorn') -> RuntimeError: no such key: "unicorn"
	// result: 63
	// tool calls: 2
}

// A program that raises fails its run with a *PythonError; the output it
// wrote before is in the Output all the same.
func ExamplePythonError() {
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	out, err := r.Run(ctx, spine.Request{Source: `
print("pricing")
total = lookup(key="book") + lookup(key="unicorn")
`})
	var pyErr *spine.PythonError
	if !errors.As(err, &pyErr) {
		log.Fatalf("not a Python error: %v", err)
	}
	fmt.Printf("%s on line %d: %s\n", pyErr.Type, pyErr.Line, pyErr.Message)
	fmt.Print(pyErr.Traceback)
	fmt.Printf("stdout: %q\n", out.Stdout)
	// Output:
	// RuntimeError on line 3: no such key: "unicorn"
	// Traceback (most recent call last):
	//   File "<agent>", line 3, in <module>
	//     total = lookup(key="book") + lookup(key="unicorn")
	//                                  ^^^^^^^^^^^^^^^^^^^^^
	// RuntimeError: no such key: "unicorn"
	// stdout: "pricing\n"
}

// With EarlyReads, the reads of a loop over data start before the program
// reaches them, all at once. Here each call waits until all three have
// started, which only early reads allow: run one at a time, the first would
// wait for ever.
func ExampleRequest_earlyReads() {
	ctx := context.Background()
	var started sync.WaitGroup
	started.Add(3)
	price := func(ctx context.Context, args json.RawMessage) (any, error) {
		started.Done()
		started.Wait() // the other two calls are in flight too
		return lookup(ctx, args)
	}
	r, err := spine.New(ctx, spine.Manifest{
		// AllowEarlyRead: price only reads, honours ctx and gives the same
		// answer within a run.
		"price": {Call: price, AllowEarlyRead: true},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	out, err := r.Run(ctx, spine.Request{
		Source: `
total = 0
for key in inputs["keys"]:
    total += price(key=key)
total
`,
		Inputs:     map[string]any{"keys": []string{"book", "pen", "book"}},
		EarlyReads: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out.Value), out.ToolCalls)
	// Output:
	// 44 3
}

// Stubs is the Python a model reads to know the tools: one function per
// tool, its signature from InputSchema and its docstring from Description;
// a dotted name becomes a class of static methods.
func ExampleStubs() {
	m := spine.Manifest{
		"lookup": {
			Call:        lookup,
			Description: "Look up the price of an item by key.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the item"}},"required":["key"]}`),
		},
		"prices.list": {
			Call:        lookup,
			Description: "List every item and its price, cheapest first.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"limit":{"type":["integer","null"]}}}`),
		},
	}
	fmt.Print(spine.Stubs(m))
	// Output:
	// from __future__ import annotations
	// from typing import Any, Literal, NotRequired, TypedDict
	//
	// def lookup(key: str) -> Any:
	//     """Look up the price of an item by key.
	//
	//     Args:
	//         key: the item
	//     """
	//
	// class prices:
	//     @staticmethod
	//     def list(limit: int | None = None) -> Any:
	//         """List every item and its price, cheapest first."""
}

// Classify sorts the error of a run into the outcomes that the CLI, the
// HTTP service and the MCP server each turn into an exit code, a status or
// a tool error.
func ExampleClassify() {
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, &spine.Options{MaxSource: 1 << 10})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	for _, req := range []spine.Request{
		{Source: `lookup(key="book")`},
		{Source: `lookup(key="unicorn")`},
		{Source: "while True:\n    pass", Timeout: 50 * time.Millisecond}, // never ends: its time limit stops it
		{Source: strings.Repeat("#", 2<<10)},                              // over MaxSource
		{Source: "1", Inputs: []int{1}},                                   // inputs must be an object
	} {
		_, err := r.Run(ctx, req)
		fmt.Println(spine.Classify(err))
	}
	// Output:
	// ok
	// python
	// timeout
	// too_large
	// bad_request
}

// A session keeps what one run defines for the next; its snapshot restores
// it, here or in another process.
func ExampleRunner_NewSession() {
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	s, err := r.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	steps := []string{
		`prices = {k: lookup(key=k) for k in ("book", "pen")}`,
		`def total(n): return n * sum(prices.values())`,
		`total(inputs["n"])`,
	}
	for _, src := range steps {
		if _, err := s.Run(ctx, spine.Request{Source: src, Inputs: map[string]int{"n": 2}}); err != nil {
			log.Fatal(err)
		}
	}
	blob, err := s.Snapshot(ctx)
	if err != nil {
		log.Fatal(err)
	}
	restored, err := r.Restore(ctx, blob)
	if err != nil {
		log.Fatal(err)
	}
	defer restored.Close(ctx)
	out, err := restored.Run(ctx, spine.Request{Source: `total(10)`})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out.Value))
	// Output: 230
}

// A recorded run replays anywhere: here on a Runner made from the record
// alone, whose tools are stand-ins no call reaches. The random number, the
// clock and the tool's result are the recorded ones; an edited program
// stops at its first difference.
func ExampleRunner_Replay() {
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)
	src := "import random, time\nprint(lookup(key='book'), random.random(), time.time())\n"
	out, err := r.Run(ctx, spine.Request{Source: src, Record: true})
	if err != nil {
		log.Fatal(err)
	}
	data, err := out.Record.Encode() // to a file, a database, another machine
	if err != nil {
		log.Fatal(err)
	}

	rec, err := spine.ParseRecord(data)
	if err != nil {
		log.Fatal(err)
	}
	elsewhere, err := spine.New(ctx, rec.Manifest(), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer elsewhere.Close(ctx)
	again, err := elsewhere.Replay(ctx, rec, &spine.ReplayOptions{
		Trace: func(c spine.ReplayedCall) { fmt.Printf("call %d: %s(%s) -> %s\n", c.N, c.Tool, c.Args, c.Response) },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same output:", again.Stdout == out.Stdout)

	rec.Source = strings.Replace(src, "'book'", "'pen'", 1)
	_, err = elsewhere.Replay(ctx, rec, nil)
	fmt.Println(errors.Is(err, spine.ErrDiverged), err)
	// Output:
	// call 1: lookup({"key":"book"}) -> {"value":21}
	// same output: true
	// true spine: replay diverged from its record: call 1: the program called lookup({"key":"pen"}) where the record has lookup({"key":"book"})
}
