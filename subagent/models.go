package subagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/deputy-go/deputy/internal/exactkeys"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// ModelChoice is one model of a spawn tool's menu (WithModelMenu).
type ModelChoice struct {
	Name     string            // what the model picks, unique: "expert", a model id
	Provider provider.Provider // nil: the spawn tool's own
	Model    string            // the id its requests name (empty: the default)
}

// menuModel is a ModelChoice resolved at NewSpawner: its provider set,
// the model id it is priced and reported by, and its price.
type menuModel struct {
	ModelChoice
	id    string // Model, or the provider's default model
	price provider.Price
}

// WithModelMenu lets the model pick each fork's model (docs/cost.md).
func WithModelMenu(prices *provider.Prices, choices ...ModelChoice) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if prices == nil {
			return errors.New("WithModelMenu(nil, …): pass the price table the choices are priced from (provider.NewPrices, provider.ReadPrices)")
		}
		if len(choices) == 0 {
			return errors.New("WithModelMenu: no choices: name the models a fork may run on, or leave the option out")
		}
		if c.menu != nil {
			return errors.New("WithModelMenu given twice: give every choice in one")
		}
		c.menu = make([]menuModel, 0, len(choices))
		c.menuPrices = prices
		for _, ch := range choices {
			if err := checkChoiceName(ch.Name); err != nil {
				return fmt.Errorf("WithModelMenu: %w", err)
			}
			for _, m := range c.menu {
				if m.Name == ch.Name {
					return fmt.Errorf("WithModelMenu: two choices are named %q: give each its own name", ch.Name)
				}
			}
			c.menu = append(c.menu, menuModel{ModelChoice: ch})
		}
		return nil
	})
}

// WithDefaultModel names the menu's choice for a fork whose spawn names none.
func WithDefaultModel(name string) SpawnOption {
	return spawnOption(func(c *spawnConfig) error {
		if name == "" {
			return errors.New("WithDefaultModel(\"\"): name a choice of WithModelMenu, or leave the option out")
		}
		c.defaultModel = name
		return nil
	})
}

func checkChoiceName(name string) error {
	if name == "" || len(name) > 64 || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("choice name %q: use 1 to 64 printable characters without spaces, such as \"haiku\"", name)
	}
	return nil
}

// resolveMenu sets each choice's provider (p when it has none), the model
// id it is known by and its price, and checks the default route.
func resolveMenu(c *spawnConfig, p provider.Provider) error {
	if c.menu == nil {
		if c.defaultModel != "" {
			return fmt.Errorf("WithDefaultModel(%q): there is no menu to route to: give the models with WithModelMenu", c.defaultModel)
		}
		return nil
	}
	for i := range c.menu {
		m := &c.menu[i]
		if m.Provider == nil {
			m.Provider = p
		}
		m.id = m.Model
		if m.id == "" {
			if d, ok := m.Provider.(interface{ Model() string }); ok {
				m.id = d.Model()
			}
		}
		var vendor string
		if n, ok := m.Provider.(provider.Namer); ok {
			vendor = n.Name()
		}
		price, ok := c.menuPrices.Lookup(vendor, m.id)
		if !ok {
			return fmt.Errorf("WithModelMenu: choice %q: the price table has no price for model %q (provider %q): add one (by model, or by \"provider/model\"), so that the model can be told what it costs",
				m.Name, m.id, vendor)
		}
		m.price = price
	}
	if c.defaultModel != "" && c.choice(c.defaultModel) == nil {
		return fmt.Errorf("WithDefaultModel(%q): no choice of WithModelMenu is named so: name one of %s", c.defaultModel, c.menuNames())
	}
	return nil
}

// choice returns the menu's choice named name, or nil.
func (c *spawnConfig) choice(name string) *menuModel {
	for i := range c.menu {
		if c.menu[i].Name == name {
			return &c.menu[i]
		}
	}
	return nil
}

func (c *spawnConfig) menuNames() string {
	names := make([]string, len(c.menu))
	for i, m := range c.menu {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

// perMillion writes a price per token as dollars per million tokens.
func perMillion(price float64) string { return fmt.Sprintf("$%.4g", price*1e6) }

// menuText describes the menu: each choice with its prices, and what a
// spawn that names no model runs on.
func (c *spawnConfig) menuText() string {
	var b strings.Builder
	for i, m := range c.menu {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s input, %s output", m.Name, perMillion(m.price.Input), perMillion(m.price.Output))
		if m.price.CacheRead > 0 && m.price.CacheRead != m.price.Input {
			fmt.Fprintf(&b, ", %s cached input", perMillion(m.price.CacheRead))
		}
		b.WriteString(")")
	}
	b.WriteString(", in US dollars per million tokens. Leave it out to run the sub-agent on ")
	if c.defaultModel != "" {
		b.WriteString(c.defaultModel + " (the default)")
	} else {
		b.WriteString("your own model")
	}
	return b.String()
}

// pickModel returns the menu's model a spawn runs its fork on: the one it
// names, else the default route; nil, with no error, when there is no
// menu and the spawn names none. A spawn that names a model not on the
// menu, or one for a roster member, is refused.
func (s *Spawner) pickModel(a spawnArgs) (*menuModel, error) {
	if a.Model == "" {
		if a.Agent != "" || s.cfg.defaultModel == "" {
			return nil, nil
		}
		return s.cfg.choice(s.cfg.defaultModel), nil
	}
	return s.named(a.Model, a.Agent)
}

// named returns the menu's choice a spawn names, or the error that
// refuses it: the name is not on the menu, or the spawn starts a roster
// member, which runs on its own model.
func (s *Spawner) named(model, member string) (*menuModel, error) {
	if member != "" && s.cfg.menu != nil {
		return nil, fmt.Errorf("%w: %w for %s: %q is a named sub-agent, which runs on its own model: leave model out, or leave agent out to start a fork on %s",
			ErrUnknownModel, tool.ErrInvalidArguments, SpawnToolName, member, model)
	}
	if m := s.cfg.choice(model); m != nil {
		return m, nil
	}
	if s.cfg.menu == nil {
		return nil, fmt.Errorf("%w: %w for %s: model %q: this tool offers no choice of model: leave model out",
			ErrUnknownModel, tool.ErrInvalidArguments, SpawnToolName, model)
	}
	return nil, fmt.Errorf("%w: %w for %s: model %q is not one you may choose: nothing was started; choose one of: %s",
		ErrUnknownModel, tool.ErrInvalidArguments, SpawnToolName, model, s.cfg.menuText())
}

// badModel returns, for a call its schema refused, the refusal of the
// model it names when that model is the cause, or nil.
func (s *Spawner) badModel(raw json.RawMessage) error {
	var a struct {
		Model *string `json:"model"`
		Agent string  `json:"agent"`
	}
	if exactkeys.Unmarshal(string(raw), &a) != nil || a.Model == nil {
		return nil
	}
	_, err := s.named(*a.Model, a.Agent)
	return err
}

// forkArgs are the arguments a fork is invoked with: its task, and the
// menu's model it runs on, which a journal records with them.
//
// They are the bytes a map of the two would marshal to (keys sorted, as
// journals written before recorded them), from a struct: a map costs a
// fork six allocations, sorting its keys, and the struct two.
func forkArgs(text string, m *menuModel) json.RawMessage {
	a := struct {
		Model string `json:"model,omitempty"`
		Task  string `json:"task"`
	}{Task: text}
	if m != nil {
		a.Model = m.Name
	}
	args, _ := json.Marshal(a)
	return args
}
