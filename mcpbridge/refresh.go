package mcpbridge

import (
	"context"
	"fmt"
	"strings"

	"github.com/deputy-go/deputy/tool"
)

// refresher re-reads the tool list each time the server announces a
// change, until Close.
func (c *Client) refresher(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		lctx, cancel := context.WithTimeout(ctx, c.cfg.connectTimeout)
		tools, err := c.list(lctx)
		cancel()
		c.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				c.err = fmt.Errorf("mcpbridge: server %s: re-reading its tools after it announced a change: %w", c.name, err)
			}
			c.mu.Unlock()
			continue
		}
		c.err = c.replace(tools)
		c.mu.Unlock()
	}
}

// replace puts tools in place of the current list, in every registry the
// Client registered into; c.mu is held. A tool whose definition did not
// change is kept as it is.
func (c *Client) replace(tools []*remoteTool) error {
	old := make(map[string]*remoteTool, len(c.tools))
	for _, t := range c.tools {
		old[t.def.Name] = t
	}
	var problems []string
	for i, t := range tools {
		if o, ok := old[t.def.Name]; ok {
			delete(old, t.def.Name)
			if sameDef(o.def, t.def) {
				tools[i] = o
				continue
			}
			o.gone.Store(true)
			for _, reg := range c.regs {
				if cur, _ := reg.Lookup(o.def.Name); cur == tool.Tool(o) {
					reg.Remove(o.def.Name)
				}
			}
		}
		for _, reg := range c.regs {
			if err := reg.Register(t); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	for name, o := range old { // gone from the server
		o.gone.Store(true)
		for _, reg := range c.regs {
			if cur, _ := reg.Lookup(name); cur == tool.Tool(o) {
				reg.Remove(name)
			}
		}
	}
	c.tools = tools
	if problems != nil {
		return fmt.Errorf("mcpbridge: server %s: some of its new tools could not be registered: %s", c.name, strings.Join(problems, "; "))
	}
	return nil
}

func sameDef(a, b tool.Definition) bool {
	return a.Name == b.Name && a.Description == b.Description && string(a.Parameters) == string(b.Parameters)
}
