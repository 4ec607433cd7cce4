package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/sessionstore"
)

// An embedder serves sessions over a transport of its own (here, function
// calls) by translating it to a Fleet, as the HTTP API and the MCP server
// do: a session is made for an owner, then each request names it by id.
// With a store, any process on it serves the same id.
func Example() {
	ctx := context.Background()
	runner, err := spine.New(ctx, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)
	store, err := sessionstore.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	sessions := fleet.New(runner, &fleet.Options{Store: store})
	defer sessions.Close(ctx)

	owner := sessionstore.Owner("a client's token")
	id, err := sessions.Create(ctx, owner)
	if err != nil {
		log.Fatal(err)
	}

	// run is one request of the transport: run source in session id.
	run := func(id, source string) {
		e, err := sessions.Get(id, owner)
		if err != nil {
			e, err = sessions.Load(ctx, id, owner) // another process wrote it
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		defer sessions.Release(e)
		if err := e.Lock(ctx); err != nil {
			fmt.Println(err)
			return
		}
		defer e.Unlock()
		out, err := sessions.Run(ctx, e, spine.Request{Source: source})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(out.Value))
	}
	run(id, "prices = {'book': 21}")
	run(id, "prices['book'] * 3")

	_, err = sessions.Get(id, sessionstore.Owner("another token"))
	fmt.Println(err == fleet.ErrNoSession)
	// Output:
	// null
	// 63
	// true
}
