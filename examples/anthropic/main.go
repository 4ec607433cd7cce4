// Command anthropic is a small agent loop on the official Anthropic Go SDK
// (the messages API) whose one tool is Spine's run_python: the model writes
// a Python program that calls the Go tool lookup, Spine runs it, and the
// result goes back to the model (marked is_error when the program failed),
// with the images the program made as image blocks, until it answers.
//
//	ANTHROPIC_API_KEY=... go run ./anthropic "What do 3 books and 2 pens cost?"
//
// -base-url (default $ANTHROPIC_BASE_URL, else the SDK's) points it at any
// server that speaks the API, a local one included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// prices is what the lookup tool knows.
var prices = map[string]int{"book": 21, "pen": 2}

// manifest is the Go tools a program may call.
func manifest() spine.Manifest {
	return spine.Manifest{"lookup": {
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ Key string }
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			if p, ok := prices[a.Key]; ok {
				return p, nil
			}
			return nil, fmt.Errorf("no such key: %q", a.Key)
		},
		AllowEarlyRead: true,
		Description:    "Look up the price of an item by key.",
		InputSchema:    json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the item, e.g. \"book\""}},"required":["key"]}`),
	}}
}

// run is the command: it prints the model's final answer to stdout and each
// run_python call to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("anthropic", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseURL := fs.String("base-url", "", "the API's base URL (default $ANTHROPIC_BASE_URL, else the SDK's)")
	apiKey := fs.String("api-key", "", "the API key (default $ANTHROPIC_API_KEY)")
	model := fs.String("model", string(anthropic.ModelClaudeSonnet5_5), "the model")
	maxTurns := fs.Int("max-turns", 8, "model calls before giving up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	prompt := "What do 3 books and 2 pens cost?"
	if fs.NArg() > 0 {
		prompt = fs.Arg(0)
	}
	var opts []option.RequestOption
	if *baseURL != "" {
		opts = append(opts, option.WithBaseURL(*baseURL))
	}
	if *apiKey != "" {
		opts = append(opts, option.WithAPIKey(*apiKey))
	}
	client := anthropic.NewClient(opts...)

	m := manifest()
	runner, err := spine.New(ctx, m, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer runner.Close(ctx)
	tool := codemode.New(runner, nil)
	var schema anthropic.ToolInputSchemaParam
	if err := json.Unmarshal(tool.InputSchema(), &schema); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}

	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(*model),
		MaxTokens: 4096,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        tool.Name(),
			Description: anthropic.String(tool.Description()),
			InputSchema: schema,
		}}},
	}
	for range *maxTurns {
		msg, err := client.Messages.New(ctx, params)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		params.Messages = append(params.Messages, msg.ToParam())
		var answer []string
		var results []anthropic.ContentBlockParamUnion
		for _, block := range msg.Content {
			switch b := block.AsAny().(type) {
			case anthropic.TextBlock:
				answer = append(answer, b.Text)
			case anthropic.ToolUseBlock:
				res := codemode.Failed(fmt.Sprintf("no tool %q: the only tool is %s", b.Name, tool.Name()))
				if b.Name == tool.Name() {
					if res, err = tool.Run(ctx, b.Input); err != nil { // ctx ended, or the Runner closed
						fmt.Fprintln(stderr, err)
						return 1
					}
				}
				fmt.Fprintf(stderr, "%s %s\n-> %s\n", b.Name, b.Input, res.Text())
				results = append(results, toolResult(b.ID, res, stderr))
			}
		}
		if len(results) == 0 {
			fmt.Fprintln(stdout, strings.Join(answer, "\n"))
			return 0
		}
		params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
	}
	fmt.Fprintln(stderr, errors.New("the model did not answer within -max-turns"))
	return 1
}

// toolResult is res as the tool_result block of the call id: its text, then
// the images the program made, which the model sees.
func toolResult(id string, res *codemode.Result, stderr io.Writer) anthropic.ContentBlockParamUnion {
	block := anthropic.ToolResultBlockParam{
		ToolUseID: id,
		Content:   []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: res.Text()}}},
		IsError:   anthropic.Bool(res.IsError),
	}
	for _, im := range res.Images {
		fmt.Fprintf(stderr, "-> [%s: %s, %dx%d]\n", im.Label(), im.MIMEType, im.Width, im.Height)
		block.Content = append(block.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{
			Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
				Data:      im.Base64(),
				MediaType: anthropic.Base64ImageSourceMediaType(im.MIMEType),
			}},
		}})
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &block}
}
