package spine_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/spine-run/spine"
)

// PriceQuery is the arguments of the typed tool price.
type PriceQuery struct {
	Key      string `json:"key" jsonschema:"the item, e.g. book"`
	Quantity int    `json:"quantity,omitempty" jsonschema:"how many (default 1)"`
}

// Price is the value of the typed tool price.
type Price struct {
	Key   string `json:"key"`
	Total int    `json:"total"`
}

// NewTool makes a Go function with typed arguments and value into a tool:
// its schemas, and so its stub, come from the types; arguments of the wrong
// shape are a TypeError in the program, and the function is not called.
func ExampleNewTool() {
	price := spine.NewTool("The price of quantity items of key.",
		func(ctx context.Context, q PriceQuery) (Price, error) {
			prices := map[string]int{"book": 21, "pen": 2}
			each, ok := prices[q.Key]
			if !ok {
				return Price{}, fmt.Errorf("no such key: %q", q.Key)
			}
			if q.Quantity == 0 {
				q.Quantity = 1
			}
			return Price{Key: q.Key, Total: each * q.Quantity}, nil
		})
	m := spine.Manifest{"price": price}
	fmt.Print(spine.Stubs(m))

	ctx := context.Background()
	r, err := spine.New(ctx, m, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)
	out, err := r.Run(ctx, spine.Request{Source: `
p = price(key="book", quantity=3)
print(p["total"])
for bad in ({"key": 7}, {"key": "pen", "quantity": "2"}, {"kee": "pen"}):
    try:
        price(**bad)
    except TypeError as e:
        print("TypeError:", e)
`})
	var pyErr *spine.PythonError
	if errors.As(err, &pyErr) {
		log.Fatal(pyErr.Traceback)
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Print(out.Stdout)
	// Output:
	// from __future__ import annotations
	// from typing import Any, Literal, NotRequired, TypedDict
	//
	// class Price(TypedDict):
	//     key: str
	//     total: int
	//
	// def price(key: str, quantity: int | None = None) -> Price:
	//     """The price of quantity items of key.
	//
	//     Args:
	//         key: the item, e.g. book
	//         quantity: how many (default 1)
	//     """
	// 63
	// TypeError: price() argument 'key' must be str, not int
	// TypeError: price() argument 'quantity' must be int, not str
	// TypeError: price() got an unexpected keyword argument 'kee'
}
