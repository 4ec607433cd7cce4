package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// The tool's definition goes to the model with the conversation; each
// run_python call the model makes comes back as JSON arguments, which Run
// runs, and the Result's text goes back to the model as the tool's result.
func Example() {
	ctx := context.Background()
	manifest := spine.Manifest{"lookup": {
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ Key string }
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			if a.Key != "book" {
				return nil, fmt.Errorf("no such key: %q", a.Key)
			}
			return 21, nil
		},
		Description: "Look up the price of an item by key.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
	}}
	runner, err := spine.New(ctx, manifest, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)
	tool := codemode.New(runner, nil)
	fmt.Println(tool.Name(), tool.Parameters()["required"])

	// The arguments of two calls, as a model sends them.
	for _, args := range []string{
		`{"source": "print('pricing')\nlookup(key='book') * inputs['quantity']", "inputs": {"quantity": 3}}`,
		`{"source": "lookup(key='unicorn')"}`,
	} {
		res, err := tool.Run(ctx, json.RawMessage(args))
		if err != nil { // ctx ended, or the Runner was closed
			log.Fatal(err)
		}
		fmt.Printf("IsError %v:\n%s\n", res.IsError, res.Text())
	}
	// Output:
	// run_python [source]
	// IsError false:
	// {"value":63,"stdout":"pricing\n"}
	// IsError true:
	// Traceback (most recent call last):
	//   File "<agent>", line 1, in <module>
	//     lookup(key='unicorn')
	// RuntimeError: no such key: "unicorn"
}
