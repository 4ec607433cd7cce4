// Command openai is a small agent loop on the official OpenAI Go SDK (chat
// completions) whose one tool is Spine's run_python: the model writes a
// Python program that calls the Go tool lookup, Spine runs it, and the
// result goes back to the model until it answers. A tool message holds only
// text: the images the program made follow the turn's tool messages in a
// user message, as image_url parts.
//
//	OPENAI_API_KEY=... go run ./openai "What do 3 books and 2 pens cost?"
//
// -base-url (default $OPENAI_BASE_URL, else the SDK's) points it at any
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

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

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
	fs := flag.NewFlagSet("openai", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseURL := fs.String("base-url", "", "the API's base URL (default $OPENAI_BASE_URL, else the SDK's)")
	apiKey := fs.String("api-key", "", "the API key (default $OPENAI_API_KEY)")
	model := fs.String("model", openai.ChatModelGPT5, "the model")
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
	client := openai.NewClient(opts...)

	m := manifest()
	runner, err := spine.New(ctx, m, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer runner.Close(ctx)
	tool := codemode.New(runner, nil)

	params := openai.ChatCompletionNewParams{
		Model:    *model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:        tool.Name(),
			Description: openai.String(tool.Description()),
			Parameters:  tool.Parameters(),
		})},
	}
	for range *maxTurns {
		completion, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if len(completion.Choices) == 0 {
			fmt.Fprintln(stderr, "the model sent no choice")
			return 1
		}
		msg := completion.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			fmt.Fprintln(stdout, msg.Content)
			return 0
		}
		params.Messages = append(params.Messages, msg.ToParam())
		var images []openai.ChatCompletionContentPartUnionParam
		for _, call := range msg.ToolCalls {
			res := codemode.Failed(fmt.Sprintf("no tool %q: the only tool is %s", call.Function.Name, tool.Name()))
			if call.Function.Name == tool.Name() {
				if res, err = tool.Run(ctx, json.RawMessage(call.Function.Arguments)); err != nil { // ctx ended, or the Runner closed
					fmt.Fprintln(stderr, err)
					return 1
				}
			}
			fmt.Fprintf(stderr, "%s %s\n-> %s\n", call.Function.Name, call.Function.Arguments, res.Text())
			params.Messages = append(params.Messages, openai.ToolMessage(res.Text(), call.ID))
			images = append(images, imageParts(call.ID, res, stderr)...)
		}
		if len(images) > 0 {
			// A tool message holds only text: the images follow the turn's
			// tool messages in a user message.
			params.Messages = append(params.Messages, openai.UserMessage(images))
		}
	}
	fmt.Fprintln(stderr, errors.New("the model did not answer within -max-turns"))
	return 1
}

// imageParts are the images the program of call id made, as the parts of a
// user message: a text part naming them, then an image_url part for each
// (a data URL). None when it made none.
func imageParts(id string, res *codemode.Result, stderr io.Writer) []openai.ChatCompletionContentPartUnionParam {
	if len(res.Images) == 0 {
		return nil
	}
	labels := make([]string, len(res.Images))
	for i, im := range res.Images {
		labels[i] = im.Label()
	}
	parts := []openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart(fmt.Sprintf("The images of %s call %s: %s.", codemode.ToolName, id, strings.Join(labels, ", "))),
	}
	for _, im := range res.Images {
		fmt.Fprintf(stderr, "-> [%s: %s, %dx%d]\n", im.Label(), im.MIMEType, im.Width, im.Height)
		parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: im.DataURL()}))
	}
	return parts
}
