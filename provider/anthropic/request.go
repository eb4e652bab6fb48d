package anthropic

import (
	"encoding/json"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// params maps req onto the SDK's request parameters, or reports why it cannot.
func (p *Provider) params(req provider.Request) (ant.MessageNewParams, error) {
	var params ant.MessageNewParams
	params.Model = req.Model
	if params.Model == "" {
		params.Model = p.model
	}
	switch {
	case req.MaxTokens < 0:
		return params, adapter.BadRequest(Name, "MaxTokens is %d; use a positive cap, or 0 for the provider's default", req.MaxTokens)
	case req.MaxTokens > 0:
		params.MaxTokens = int64(req.MaxTokens)
	default:
		params.MaxTokens = int64(p.maxTokens)
	}
	if req.System != "" {
		params.System = []ant.TextBlockParam{{Text: req.System}}
	}

	msgs, err := messages(req.Messages)
	if err != nil {
		return params, err
	}
	params.Messages = msgs

	for i, d := range req.Tools {
		t, err := tool(i, d)
		if err != nil {
			return params, err
		}
		params.Tools = append(params.Tools, t)
	}

	if len(req.ResponseSchema) > 0 {
		schema, err := adapter.Object(req.ResponseSchema)
		if err != nil {
			return params, adapter.BadRequest(Name, "ResponseSchema is not a JSON object (%v); give a JSON Schema such as {\"type\":\"object\"}", err)
		}
		if narrowed, ok := outputSchema(schema); ok && !p.noFormat {
			params.OutputConfig.Format = ant.JSONOutputFormatParam{Schema: narrowed}
		}
	}
	if !p.noCache {
		breakpoints(&params)
		if n := req.SharedPrefix; n > 0 && n <= len(req.Messages) {
			// The shared prefix's end: its turns as they are mapped
			// alone, whose last block is where it ends in the request
			// (what follows it adds turns, or blocks after it: the task
			// a fork adds is text, which follows tool results).
			shared, err := messages(req.Messages[:n])
			if err == nil && len(shared) > 0 && len(shared) <= len(params.Messages) {
				last := len(shared) - 1
				markBlock(&params.Messages[last], len(turnBlocks(&shared[last]))-1, ant.NewCacheControlEphemeralParam())
			}
		}
	}
	return params, nil
}

// breakpoints marks where the cached prefixes end: the system prompt (or
// the last tool, without one), the previous user turn and the last turn.
// The API takes at most four.
func breakpoints(params *ant.MessageNewParams) {
	cc := ant.NewCacheControlEphemeralParam()
	if n := len(params.System); n > 0 {
		params.System[n-1].CacheControl = cc
	} else if n := len(params.Tools); n > 0 {
		if c := params.Tools[n-1].GetCacheControl(); c != nil {
			*c = cc
		}
	}
	msgs := params.Messages
	last := len(msgs) - 1
	markEnd(&msgs[last], cc)
	// The turn where the previous request ended: the user turn before the
	// last, which in a ReAct loop or a resident's conversation is the
	// last turn the previous call sent.
	for i := last - 1; i >= 0; i-- {
		if msgs[i].OfUser != nil {
			markEnd(&msgs[i], cc)
			break
		}
	}
}

// markEnd puts a breakpoint on the last block of m.
func markEnd(m *ant.MessageParam, cc ant.CacheControlEphemeralParam) {
	markBlock(m, len(turnBlocks(m))-1, cc)
}

// markBlock puts a breakpoint on block i of m, if it has one.
func markBlock(m *ant.MessageParam, i int, cc ant.CacheControlEphemeralParam) {
	if blocks := turnBlocks(m); i >= 0 && i < len(blocks) {
		if c := blocks[i].GetCacheControl(); c != nil {
			*c = cc
		}
	}
}

// turnBlocks returns the content blocks of m.
func turnBlocks(m *ant.MessageParam) []ant.ContentBlockParamUnion {
	switch {
	case m.OfUser != nil:
		return m.OfUser.Content
	case m.OfAssistant != nil:
		return m.OfAssistant.Content
	}
	return nil
}

// messages maps a conversation onto Messages turns: tool results join the
// user turn that answers the assistant's tool calls, and messages of the
// same turn are merged.
func messages(msgs []provider.Message) ([]ant.MessageParam, error) {
	var out []ant.MessageParam
	// appendBlocks adds blocks to the last turn when it has the same role,
	// else starts a turn. Tool results stay ahead of other blocks in a user
	// turn, as the API requires.
	appendBlocks := func(user bool, blocks ...ant.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 {
			last := &out[n-1]
			switch {
			case user && last.OfUser != nil:
				last.OfUser.Content = mergeUser(last.OfUser.Content, blocks)
				return
			case !user && last.OfAssistant != nil:
				last.OfAssistant.Content = append(last.OfAssistant.Content, blocks...)
				return
			}
		}
		if user {
			out = append(out, ant.NewUserMessage(blocks...))
		} else {
			out = append(out, ant.NewAssistantMessage(blocks...))
		}
	}

	for i, m := range msgs {
		switch m.Role {
		case provider.RoleUser:
			if m.Content != "" {
				appendBlocks(true, ant.NewTextBlock(m.Content))
			}
		case provider.RoleAssistant:
			var blocks []ant.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, ant.NewTextBlock(m.Content))
			}
			for j, c := range m.ToolCalls {
				if c.ID == "" {
					return nil, adapter.BadRequest(Name, "message %d: tool call %d (%s) has no ID; keep the ID the model gave the call", i, j, c.Name)
				}
				if c.Name == "" {
					return nil, adapter.BadRequest(Name, "message %d: tool call %q has no name; keep the name the model gave the call", i, c.ID)
				}
				args := json.RawMessage(adapter.Arguments(c.Arguments))
				if !adapter.IsObject(args) {
					args = json.RawMessage("{}")
				}
				blocks = append(blocks, ant.NewToolUseBlock(toolID(c.ID), args, c.Name))
			}
			appendBlocks(false, blocks...)
		case provider.RoleTool:
			if m.ToolCallID == "" {
				return nil, adapter.BadRequest(Name, "message %d is a tool result without ToolCallID; set it to the ID of the call it answers", i)
			}
			r := ant.ToolResultBlockParam{ToolUseID: toolID(m.ToolCallID)}
			if m.Content != "" {
				r.Content = []ant.ToolResultBlockParamContentUnion{{OfText: &ant.TextBlockParam{Text: m.Content}}}
			}
			if m.IsError {
				r.IsError = param.NewOpt(true)
			}
			appendBlocks(true, ant.ContentBlockParamUnion{OfToolResult: &r})
		case provider.RoleSystem:
			return nil, adapter.BadRequest(Name, "message %d has role system; put the system prompt in Request.System", i)
		default:
			return nil, adapter.BadRequest(Name, "message %d has unknown role %q; use user, assistant or tool", i, m.Role)
		}
	}
	if len(out) == 0 {
		return nil, adapter.BadRequest(Name, "the request has no messages with content; add at least one user message")
	}
	return out, nil
}

// mergeUser appends blocks to a user turn, keeping tool results first.
func mergeUser(have, add []ant.ContentBlockParamUnion) []ant.ContentBlockParamUnion {
	for _, b := range add {
		if b.OfToolResult == nil {
			have = append(have, b)
			continue
		}
		at := 0
		for at < len(have) && have[at].OfToolResult != nil {
			at++
		}
		have = append(have[:at], append([]ant.ContentBlockParamUnion{b}, have[at:]...)...)
	}
	return have
}

// toolID returns id with every character the API does not allow in a tool
// use ID replaced by _.
func toolID(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, id)
}

// tool maps the i-th tool definition. The API wants the schema's properties
// and required list as fields; every other keyword travels as it is.
func tool(i int, d provider.ToolDef) (ant.ToolUnionParam, error) {
	if d.Name == "" {
		return ant.ToolUnionParam{}, adapter.BadRequest(Name, "tool %d has no name; give every tool a name", i)
	}
	schema, err := adapter.Object(d.Parameters)
	if err != nil {
		return ant.ToolUnionParam{}, adapter.BadRequest(Name, "tool %q: parameters are not a JSON object (%v); give a JSON Schema such as {\"type\":\"object\"}", d.Name, err)
	}
	var in ant.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
			if v != "object" {
				return ant.ToolUnionParam{}, adapter.BadRequest(Name, "tool %q: parameters have type %v; the API takes an object schema, so wrap the arguments in {\"type\":\"object\",\"properties\":{...}}", d.Name, v)
			}
		case "properties":
			in.Properties = v
		case "required":
			list, ok := v.([]any)
			if !ok {
				return ant.ToolUnionParam{}, adapter.BadRequest(Name, "tool %q: \"required\" is not a list of property names", d.Name)
			}
			for _, name := range list {
				s, ok := name.(string)
				if !ok {
					return ant.ToolUnionParam{}, adapter.BadRequest(Name, "tool %q: \"required\" is not a list of property names", d.Name)
				}
				in.Required = append(in.Required, s)
			}
		default:
			if in.ExtraFields == nil {
				in.ExtraFields = map[string]any{}
			}
			in.ExtraFields[k] = v
		}
	}
	t := ant.ToolUnionParamOfTool(in, d.Name)
	if d.Description != "" {
		t.OfTool.Description = param.NewOpt(d.Description)
	}
	return t, nil
}
