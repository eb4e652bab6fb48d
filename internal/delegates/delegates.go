// Package delegates lets package agent find, when it builds an agent
// with a policy, the agents its sub-agent tools hand work to, which only
// package subagent, which imports agent, can name.
package delegates

import "github.com/deputy-go/deputy/tool"

// Of returns the agents t hands work to that are known when t is built
// (an agent.Agent each), nil for any other tool. Package subagent sets it
// when it is loaded; it is nil when no sub-agent tool can exist.
var Of func(t tool.Tool) []any
