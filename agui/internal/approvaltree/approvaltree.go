// Package approvaltree builds, for tests of AG-UI interrupts, a lead agent
// whose child delegates to a grandchild whose "delete" tool needs a
// person's approval. Every model is a function of its request that names
// its tool call afresh on every request, as a real model does: a run
// resumed by another process (or after a restart) must find its place in
// the journal without the provider's help.
package approvaltree

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// Counts are the work done, for assertions, and the tree's one setting.
type Counts struct {
	// TTL, when positive, is how long the approval question may wait.
	TTL time.Duration

	// Deletes counts runs of the delete tool; ModelCalls the model calls
	// actually made (not replayed from the journal).
	Deletes, ModelCalls atomic.Int64
}

// ProviderName is the name every model of the tree gives as its provider
// (provider.Namer); each agent's model is named after the agent, such as
// "lead-model". Each model call costs 10 input and 2 output tokens.
const ProviderName = "scripted"

// named is a model that says which provider it is.
type named struct{ provider.Func }

func (named) Name() string { return ProviderName }

// model answers with call (when the request holds no tool result yet) or
// with final followed by the last tool result.
func model(c *Counts, name string, callID, toolName, args, final string) provider.Provider {
	return named{func(ctx context.Context, req provider.Request) (provider.Response, error) {
		n := c.ModelCalls.Add(1)
		u := provider.Usage{InputTokens: 10, OutputTokens: 2, Requests: 1}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != provider.RoleTool {
			msg := provider.AssistantMessage("")
			msg.ToolCalls = []provider.ToolCall{{ID: callID + "-" + strconv.FormatInt(n, 10), Name: toolName, Arguments: json.RawMessage(args)}}
			return provider.Response{Message: msg, StopReason: provider.StopToolUse, Usage: u, Model: name + "-model"}, nil
		}
		return provider.Response{Message: provider.AssistantMessage(final + ": " + last.Content), StopReason: provider.StopEndTurn, Usage: u, Model: name + "-model"}, nil
	}}
}

func taskInput(args json.RawMessage) (agent.Input, error) {
	var v struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(args, &v); err != nil || strings.TrimSpace(v.Task) == "" {
		return agent.Input{}, tool.Correctable(tool.ErrInvalidArguments)
	}
	return agent.Input{Text: v.Task}, nil
}

// Build returns the lead agent of a fresh tree counting into c.
func Build(c *Counts) (agent.Agent, error) {
	del, err := tool.New("delete", "Deletes a file.", func(ctx context.Context, in struct {
		Path string `json:"path"`
	}) (string, error) {
		c.Deletes.Add(1)
		return "deleted " + in.Path, nil
	})
	if err != nil {
		return nil, err
	}
	grand, err := subagent.FromFactory("cleaner", "Deletes files.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model(c, "cleaner", "g1", "delete", `{"path":"/tmp/old.log"}`, "cleaner finished"),
			agent.WithName("cleaner"), agent.WithTools(tool.RequireApproval(del, "deletes a file", c.TTL)))
	}, subagent.WithInputFromArgs(taskInput), subagent.WithMaxDepth(2))
	if err != nil {
		return nil, err
	}
	child, err := subagent.FromFactory("janitor", "Tidies the disk.", func(ctx context.Context, _ json.RawMessage) (agent.Agent, error) {
		return agent.NewReact(model(c, "janitor", "c1", "cleaner", `{"task":"delete old logs"}`, "janitor finished"),
			agent.WithName("janitor"), agent.WithTools(grand))
	}, subagent.WithInputFromArgs(taskInput))
	if err != nil {
		return nil, err
	}
	return agent.NewReact(model(c, "lead", "l1", "janitor", `{"task":"tidy the disk"}`, "lead finished"),
		agent.WithName("lead"), agent.WithTools(child))
}
