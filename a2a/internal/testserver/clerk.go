package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/deputy-go/deputy/a2a"
	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// waitLimit is how long the wait tool works when nobody cancels it.
const waitLimit = 30 * time.Second

// wordPause is the pause between the words of a streamed answer, long
// enough for each to reach the client as an update of its own.
const wordPause = 20 * time.Millisecond

// clerk is the served agent and the counts of what it did.
type clerk struct {
	build         a2a.Builder      // a fresh clerk for each task
	skills        []sdk.AgentSkill // its tools, as its card lists them
	transfers     atomic.Int64
	cancellations atomic.Int64
	modelCalls    atomic.Int64
	callIDs       atomic.Int64
}

func newClerk() (*clerk, error) {
	c := &clerk{}
	transfer, err := tool.New("transfer", "Moves an amount of money.", func(_ context.Context, in struct {
		Amount int `json:"amount"`
	}) (string, error) {
		c.transfers.Add(1)
		return "moved " + strconv.Itoa(in.Amount), nil
	})
	if err != nil {
		return nil, err
	}
	wait, err := tool.New("wait", "Works until the task is cancelled.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case <-ctx.Done():
			c.cancellations.Add(1)
			return "", ctx.Err()
		case <-time.After(waitLimit):
			return "waited", nil
		}
	})
	if err != nil {
		return nil, err
	}
	for _, t := range []tool.Tool{transfer, wait} {
		d := t.Definition()
		c.skills = append(c.skills, sdk.AgentSkill{ID: d.Name, Name: d.Name, Description: d.Description, Tags: []string{"deputy"}})
	}
	c.build = func(context.Context, a2a.Task) (agent.Agent, error) {
		return agent.NewReact(script{c}, agent.WithName("clerk"),
			agent.WithTools(tool.RequireApproval(transfer, "moves money", 0), wait))
	}
	return c, nil
}

// script is the clerk's model: it reads the user's message and the last
// tool result, and replies as the package comment says.
type script struct{ c *clerk }

func (s script) reply(req provider.Request) provider.Response {
	s.c.modelCalls.Add(1)
	usage := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
	msgs := req.Messages
	if len(msgs) > 0 && msgs[len(msgs)-1].Role == provider.RoleTool {
		return provider.Response{Message: provider.AssistantMessage("done: " + msgs[len(msgs)-1].Content), Usage: usage}
	}
	var text string
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			text = strings.TrimSpace(msgs[i].Content)
			break
		}
	}
	call := provider.ToolCall{ID: "call_" + strconv.FormatInt(s.c.callIDs.Add(1), 10)}
	if amount, ok := strings.CutPrefix(text, "pay "); ok {
		n, err := strconv.Atoi(strings.TrimSpace(amount))
		if err == nil {
			call.Name, call.Arguments = "transfer", json.RawMessage(`{"amount":`+strconv.Itoa(n)+`}`)
			return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}
		}
	}
	if text == "wait" {
		call.Name, call.Arguments = "wait", json.RawMessage(`{}`)
		return provider.Response{Message: provider.AssistantMessage("", call), Usage: usage}
	}
	return provider.Response{Message: provider.AssistantMessage("You said: " + text), Usage: usage}
}

// Complete implements provider.Provider.
func (s script) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	return s.reply(req), nil
}

// Stream implements provider.Streamer: a text reply arrives a word at a
// time, a tool call whole.
func (s script) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	resp := s.reply(req)
	if onDelta == nil {
		return resp, nil
	}
	for i, c := range resp.Message.ToolCalls {
		d := provider.Delta{ToolCall: provider.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)}}
		if err := onDelta(d); err != nil {
			return provider.Response{}, err
		}
	}
	text := resp.Message.Content
	for i := 0; text != ""; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return provider.Response{}, ctx.Err()
			case <-time.After(wordPause):
			}
		}
		word := text
		if n := strings.IndexByte(text[1:], ' '); n >= 0 {
			word = text[:n+1]
		}
		text = text[len(word):]
		if err := onDelta(provider.Delta{Text: word}); err != nil {
			return provider.Response{}, err
		}
	}
	return resp, nil
}
