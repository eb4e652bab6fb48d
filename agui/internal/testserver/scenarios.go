package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/subagent"
	"github.com/deputy-go/deputy/tool"
)

// pause is how long a slow child waits before each piece of its reply.
const pause = 250 * time.Millisecond

// stopAfter is when the "stopped" scenario stops its run: well inside the
// slow run, which takes seconds.
const stopAfter = 600 * time.Millisecond

// build makes the agent tree of one request; stop stops the runs of a
// thread (Handler.Stop).
func build(ctx context.Context, in *agui.RunInput, stop func(owner, threadID string) bool) (agent.Agent, error) {
	var props struct {
		Scenario string `json:"scenario"`
	}
	if in.ForwardedProps != nil {
		if err := json.Unmarshal(in.ForwardedProps, &props); err != nil {
			return nil, fmt.Errorf("%w: forwardedProps.scenario: %v", agui.ErrBadInput, err)
		}
	}
	topicB := "research topic B"
	var wait time.Duration
	answer := fake.Text("Both researchers have reported; here is the summary.")
	switch props.Scenario {
	case "", "two-children":
	case "conversation":
		answer = fake.Respond(digest)
	case "child-error":
		topicB = "research topic B (its source fails)"
	case "slow":
		wait = pause
	case "stopped":
		wait = pause
		time.AfterFunc(stopAfter, func() { stop(in.Owner, in.ThreadID) })
	default:
		return nil, fmt.Errorf("%w: unknown scenario %q: use two-children, child-error, slow, stopped or conversation", agui.ErrBadInput, props.Scenario)
	}
	return tree(topicB, wait, answer)
}

// tree is the lead agent and its researcher tool, on a fresh script. The
// researchers wait before each piece of their replies when wait is set.
// The lead's last reply is answer.
func tree(topicB string, wait time.Duration, answer fake.Reply) (agent.Agent, error) {
	p := fake.NewProvider(
		fake.Calls(
			provider.ToolCall{Name: "researcher", Arguments: taskArgs("research topic A")},
			provider.ToolCall{Name: "researcher", Arguments: taskArgs(topicB)},
		).Saying("I will ask two researchers.").For("lead"),
		answer.For("lead"),
	)
	for range 4 {
		p.Add(fake.Respond(researcherReply).For("researcher"))
	}
	var childModel provider.Provider = p
	if wait > 0 {
		childModel = paced{p, wait}
	}
	search, err := tool.New("search", "Searches the web for a query.", func(ctx context.Context, in struct {
		Query string `json:"query"`
	}) (string, error) {
		return "3 sources on " + in.Query, nil
	})
	if err != nil {
		return nil, err
	}
	childTools, err := tool.NewRegistry(search)
	if err != nil {
		return nil, err
	}
	researcher, err := subagent.FromFactory("researcher", "Researches one topic.",
		func(ctx context.Context, args json.RawMessage) (agent.Agent, error) {
			return agent.NewReact(childModel, agent.WithName("researcher"), agent.WithRegistry(childTools))
		},
		subagent.WithInputFromArgs(func(args json.RawMessage) (agent.Input, error) {
			var a struct {
				Task string `json:"task"`
			}
			err := json.Unmarshal(args, &a)
			return agent.Input{Text: a.Task}, err
		}))
	if err != nil {
		return nil, err
	}
	return agent.NewReact(p, agent.WithName("lead"), agent.WithTools(researcher))
}

// seenMessage is one message of the lead's conversation as its model
// received it.
type seenMessage struct {
	Role       string   `json:"role"`
	Content    string   `json:"content,omitempty"`
	Calls      []string `json:"calls,omitempty"`
	ToolCallID string   `json:"toolCallId,omitempty"`
}

// digest is the lead's answer in the conversation scenario: the messages
// its model received on this last call, as JSON, so that a client can check
// what reached the lead over several turns. Tool results are left without
// their text, so that a child's words in the lead's answer can only come
// from a message the lead should not have seen.
func digest(ctx context.Context, req provider.Request) (provider.Response, error) {
	seen := make([]seenMessage, len(req.Messages))
	for i, m := range req.Messages {
		seen[i] = seenMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		if m.Role == provider.RoleTool {
			seen[i].Content = "" // a child's answer: the lead may read it, but need not repeat it
		}
		for _, c := range m.ToolCalls {
			seen[i].Calls = append(seen[i].Calls, c.Name)
		}
	}
	b, err := json.Marshal(seen)
	if err != nil {
		return provider.Response{}, err
	}
	return provider.Response{Message: provider.AssistantMessage(string(b)), StopReason: provider.StopEndTurn}, nil
}

func taskArgs(task string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"task": task})
	return b
}

// researcherModel is the model the researchers' replies name.
const researcherModel = "fake-small"

// researcherReply scripts a researcher: it says what it will look for and
// searches, then reports. When its task's source fails, its model fails
// after the search.
func researcherReply(ctx context.Context, req provider.Request) (provider.Response, error) {
	task := req.Messages[0].Content
	topic := strings.TrimPrefix(task, "research ")
	// Each reply reports its usage and model, as a real model's does, so
	// that each child's SUBAGENT_FINISHED carries its tokens and model.
	if last := req.Messages[len(req.Messages)-1]; last.Role != provider.RoleTool {
		args, _ := json.Marshal(map[string]string{"query": topic})
		msg := provider.AssistantMessage("Searching for "+topic+".", provider.ToolCall{Name: "search", Arguments: args})
		return provider.Response{Message: msg, Usage: fake.Usage(req, msg), Model: researcherModel, StopReason: provider.StopToolUse}, nil
	}
	if strings.Contains(task, "fails") {
		return provider.Response{}, errors.New("the source timed out")
	}
	msg := provider.AssistantMessage("Findings on " + topic + ": three sources agree, so it is settled.")
	return provider.Response{Message: msg, Usage: fake.Usage(req, msg), Model: researcherModel, StopReason: provider.StopEndTurn}, nil
}

// paced is a provider that waits before each piece of a streamed reply.
type paced struct {
	p     *fake.Provider
	pause time.Duration
}

func (s paced) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if err := sleep(ctx, s.pause); err != nil {
		return provider.Response{}, err
	}
	return s.p.Complete(ctx, req)
}

func (s paced) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	return s.p.Stream(ctx, req, func(d provider.Delta) error {
		if err := sleep(ctx, s.pause); err != nil {
			return err
		}
		if onDelta == nil {
			return nil
		}
		return onDelta(d)
	})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
