package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/internal/adapter"
)

// responseFormatName names the structured-output schema; the API requires a
// name and deputy's vocabulary has none.
const responseFormatName = "response"

// params maps req onto the SDK's request parameters, or reports why it cannot.
func (p *Provider) params(req provider.Request) (oai.ChatCompletionNewParams, error) {
	var params oai.ChatCompletionNewParams
	params.Model = req.Model
	if params.Model == "" {
		params.Model = p.model
	}

	if len(req.Messages) == 0 {
		return params, adapter.BadRequest(Name, "the request has no messages; add at least one user message")
	}
	if req.System != "" {
		params.Messages = append(params.Messages, oai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		msg, err := message(i, m)
		if err != nil {
			return params, err
		}
		params.Messages = append(params.Messages, msg)
	}

	for i, d := range req.Tools {
		if d.Name == "" {
			return params, adapter.BadRequest(Name, "tool %d has no name; give every tool a name", i)
		}
		schema, err := adapter.Object(d.Parameters)
		if err != nil {
			return params, adapter.BadRequest(Name, "tool %q: parameters are not a JSON object (%v); give a JSON Schema such as {\"type\":\"object\"}", d.Name, err)
		}
		if len(schema) == 0 {
			schema = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		fn := shared.FunctionDefinitionParam{Name: d.Name, Parameters: shared.FunctionParameters(schema)}
		if d.Description != "" {
			fn.Description = param.NewOpt(d.Description)
		}
		params.Tools = append(params.Tools, oai.ChatCompletionFunctionTool(fn))
	}

	switch {
	case req.MaxTokens < 0:
		return params, adapter.BadRequest(Name, "MaxTokens is %d; use a positive cap, or 0 for the model's default", req.MaxTokens)
	case req.MaxTokens > 0 && p.legacyMaxTokens:
		params.MaxTokens = param.NewOpt(int64(req.MaxTokens))
	case req.MaxTokens > 0:
		params.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		params.Temperature = param.NewOpt(*req.Temperature)
	}
	if len(req.ResponseSchema) > 0 && !p.noFormat {
		var schema map[string]any
		if err := json.Unmarshal(req.ResponseSchema, &schema); err != nil || schema == nil {
			return params, adapter.BadRequest(Name, "ResponseSchema is not a JSON object; give a JSON Schema such as {\"type\":\"object\"}")
		}
		format := shared.ResponseFormatJSONSchemaJSONSchemaParam{
			Name:   responseFormatName,
			Schema: json.RawMessage(req.ResponseSchema),
		}
		if strictFits(schema) {
			format.Strict = param.NewOpt(true)
		}
		params.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: format}
	}
	if req.CacheKey != "" && !p.noCacheKey {
		params.PromptCacheKey = param.NewOpt(cacheKey(req.CacheKey))
	}
	return params, nil
}

// message maps the i-th message of a conversation.
func message(i int, m provider.Message) (oai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case provider.RoleUser:
		return oai.UserMessage(m.Content), nil
	case provider.RoleAssistant:
		var a oai.ChatCompletionAssistantMessageParam
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Content)
		}
		for j, c := range m.ToolCalls {
			if c.ID == "" {
				return oai.ChatCompletionMessageParamUnion{}, adapter.BadRequest(Name, "message %d: tool call %d (%s) has no ID; keep the ID the model gave the call", i, j, c.Name)
			}
			if c.Name == "" {
				return oai.ChatCompletionMessageParamUnion{}, adapter.BadRequest(Name, "message %d: tool call %q has no name; keep the name the model gave the call", i, c.ID)
			}
			a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ID,
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      c.Name,
						Arguments: string(adapter.Arguments(c.Arguments)),
					},
				},
			})
		}
		return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case provider.RoleTool:
		if m.ToolCallID == "" {
			return oai.ChatCompletionMessageParamUnion{}, adapter.BadRequest(Name, "message %d is a tool result without ToolCallID; set it to the ID of the call it answers", i)
		}
		return oai.ToolMessage(m.Content, m.ToolCallID), nil
	case provider.RoleSystem:
		return oai.ChatCompletionMessageParamUnion{}, adapter.BadRequest(Name, "message %d has role system; put the system prompt in Request.System", i)
	default:
		return oai.ChatCompletionMessageParamUnion{}, adapter.BadRequest(Name, "message %d has unknown role %q; use user, assistant or tool", i, m.Role)
	}
}

// maxCacheKey is the longest prompt_cache_key the API takes.
const maxCacheKey = 64

// cacheKey returns key as prompt_cache_key takes it: as it is when short
// and plain printable ASCII, else its SHA-256 in hex (64 bytes), which keeps
// distinct keys distinct.
func cacheKey(key string) string {
	plain := len(key) <= maxCacheKey
	for i := 0; plain && i < len(key); i++ {
		plain = key[i] >= 0x20 && key[i] < 0x7f
	}
	if plain {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
