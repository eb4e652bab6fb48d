package jsonschema

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Bounds on a JSON Schema a model writes (CompileUntrusted), and on
// the work of checking a value against one. A schema can make a validator
// do work exponential in its size: each "allOf" of two "$ref"s to the
// previous definition doubles the checks one value gets, so a 2 KB schema
// can check the answer "x" for ever. The bounds keep every check of a
// model's schema to a few hundred milliseconds.
const (
	// MaxUntrustedBytes bounds the text of a model's schema.
	MaxUntrustedBytes = 16 << 10
	// MaxUntrustedDepth bounds how deeply the objects and arrays of a
	// model's schema nest.
	MaxUntrustedDepth = 32
	// MaxWeight bounds the weight of a model's schema: the number of
	// subschemas that check one place of a value, counted through allOf,
	// anyOf, oneOf, not, if/then/else, dependentSchemas and each $ref
	// followed. Written-out schemas weigh a few dozen.
	MaxWeight = 1000
	// MaxValidationWork bounds the work of checking one value against a
	// model's schema, counted as the pairs of a subschema and a place of
	// the value it applies to (a subschema with n enum values and m
	// subschemas of its own counts 1+n+m, a string scanned by pattern,
	// format or a length one more per 64 bytes). A
	// value that a schema checks many times over is refused at this bound
	// rather than checked for minutes; the costliest check it lets through
	// takes about 0.4 s (BenchmarkValidateAtWorkBound).
	MaxValidationWork = 1 << 18
)

// graph is the shape of a compiled schema that bounds its work: each
// subschema and the subschemas it applies, to the same place or to the
// members and elements of an object or array.
type graph struct {
	nodes []gnode
}

type gnode struct {
	edges []gedge
	// cost is the work of checking one value, beyond the edges' own: 1,
	// plus an enum's length (each member is compared), plus the number of
	// edges (each is looked at, whether it applies to the value or not).
	cost int
	// scans: the node reads a string value's text (pattern, format,
	// lengths), which costs one more for each 64 bytes.
	scans bool
}

// How an edge applies its target.
const (
	sameValue   = iota // to the same value: allOf, $ref, …
	member             // to the member named key: properties
	allMembers         // to every member value: additionalProperties, …
	allKeys            // to every member name: propertyNames
	element            // to the element at index: prefixItems
	allElements        // to every element: items, contains, …
)

type gedge struct {
	kind   int
	key    string // member
	index  int    // element
	target int
}

// builder turns a decoded schema document into a graph, resolving "$ref"s
// that point into the document.
type builder struct {
	root      any
	untrusted bool
	draft4    bool           // the document is draft-04, where "id" is a keyword
	ids       map[string]int // node by normalized JSON pointer
	g         *graph
	err       error
	// opaque: a trusted schema holds a nested "$id", below which "#…"
	// references mean another document; the graph is not built.
	opaque bool
}

// Keywords whose value is a schema, applied to the same value.
var sameKeywords = []string{"not", "if", "then", "else"}

// Keywords whose value is an array of schemas, applied to the same value.
var sameArrayKeywords = []string{"allOf", "anyOf", "oneOf"}

// Keywords that redefine where a reference points, or point in ways the
// graph cannot follow: refused in a model's schema.
var unfollowable = []string{"$id", "id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"}

func newBuilder(doc any, untrusted bool) *builder {
	b := &builder{root: doc, untrusted: untrusted, ids: map[string]int{}, g: &graph{}}
	if m, ok := doc.(map[string]any); ok {
		d, _ := m["$schema"].(string)
		b.draft4 = strings.Contains(d, "draft-04")
	}
	return b
}

// node returns the id of the schema at pointer ptr (its value v), adding it
// and its edges the first time.
func (b *builder) node(ptr string, v any, nested bool) int {
	if id, ok := b.ids[ptr]; ok {
		return id
	}
	id := len(b.g.nodes)
	b.ids[ptr] = id
	b.g.nodes = append(b.g.nodes, gnode{})
	m, ok := v.(map[string]any)
	if !ok || b.err != nil || b.opaque {
		return id // a boolean schema, or not a schema the validator accepts
	}
	for _, k := range unfollowable {
		if _, has := m[k]; !has || k == "id" && !b.draft4 {
			continue
		}
		rebases := k == "$id" || k == "id"
		if rebases && !nested {
			continue
		}
		if b.untrusted {
			b.err = fmt.Errorf("at %s: %s is not accepted here: refer to parts of the schema only with \"$ref\": \"#/$defs/name\"", where(ptr), k)
			return id
		}
		if rebases {
			b.opaque = true
			return id
		}
	}
	b.g.nodes[id].cost = 1
	if e, ok := m["enum"].([]any); ok {
		b.g.nodes[id].cost += len(e)
	}
	for _, k := range []string{"pattern", "format", "minLength", "maxLength", "contentEncoding", "contentMediaType"} {
		if _, ok := m[k]; ok {
			b.g.nodes[id].scans = true
		}
	}
	var edges []gedge
	add := func(kind int, key string, index int, sub string, sv any) {
		edges = append(edges, gedge{kind: kind, key: key, index: index, target: b.node(sub, sv, true)})
	}
	for _, k := range sameKeywords {
		if sv, ok := m[k]; ok {
			add(sameValue, "", 0, ptr+"/"+k, sv)
		}
	}
	for _, k := range sameArrayKeywords {
		if a, ok := m[k].([]any); ok {
			for i, sv := range a {
				add(sameValue, "", 0, ptr+"/"+k+"/"+strconv.Itoa(i), sv)
			}
		}
	}
	if ds, ok := m["dependentSchemas"].(map[string]any); ok {
		for k, sv := range ds {
			add(sameValue, "", 0, ptr+"/dependentSchemas/"+escape(k), sv)
		}
	}
	if ps, ok := m["properties"].(map[string]any); ok {
		for k, sv := range ps {
			add(member, k, 0, ptr+"/properties/"+escape(k), sv)
		}
	}
	if ps, ok := m["patternProperties"].(map[string]any); ok {
		for k, sv := range ps {
			add(allMembers, "", 0, ptr+"/patternProperties/"+escape(k), sv)
		}
	}
	for _, k := range []string{"additionalProperties", "unevaluatedProperties"} {
		if sv, ok := m[k]; ok {
			add(allMembers, "", 0, ptr+"/"+k, sv)
		}
	}
	if sv, ok := m["propertyNames"]; ok {
		add(allKeys, "", 0, ptr+"/propertyNames", sv)
	}
	if a, ok := m["prefixItems"].([]any); ok {
		for i, sv := range a {
			add(element, "", i, ptr+"/prefixItems/"+strconv.Itoa(i), sv)
		}
	}
	if a, ok := m["items"].([]any); ok { // drafts before 2020-12
		for i, sv := range a {
			add(element, "", i, ptr+"/items/"+strconv.Itoa(i), sv)
		}
	} else if sv, ok := m["items"]; ok {
		add(allElements, "", 0, ptr+"/items", sv)
	}
	for _, k := range []string{"additionalItems", "contains", "unevaluatedItems"} {
		if sv, ok := m[k]; ok {
			add(allElements, "", 0, ptr+"/"+k, sv)
		}
	}
	if ref, ok := m["$ref"].(string); ok {
		if tptr, tv, ok := b.resolve(ptr, ref); ok {
			add(sameValue, "", 0, tptr, tv)
		}
	}
	b.g.nodes[id].edges = edges
	b.g.nodes[id].cost += len(edges) // each is looked at, whether it applies or not
	return id
}

// resolve finds the schema ref points to, as a normalized pointer and its
// value. It reports false for a reference the graph does not follow (one
// outside the document, in a trusted schema); in a model's schema such a
// reference is an error.
func (b *builder) resolve(from, ref string) (string, any, bool) {
	fail := func(why string) (string, any, bool) {
		if b.untrusted && b.err == nil {
			b.err = fmt.Errorf("at %s: $ref %s %s: refer to parts of this schema with \"#/$defs/name\"", where(from), clipRef(ref), why)
		}
		return "", nil, false
	}
	if !strings.HasPrefix(ref, "#") {
		return fail("is outside the schema")
	}
	frag, err := url.PathUnescape(ref[1:])
	if err != nil {
		return fail("is not a valid reference")
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return fail("names an anchor")
	}
	v := b.root
	norm := ""
	if frag != "" {
		for _, seg := range strings.Split(frag[1:], "/") {
			seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
			switch c := v.(type) {
			case map[string]any:
				sv, ok := c[seg]
				if !ok {
					return fail("points to nothing")
				}
				v = sv
			case []any:
				i, err := strconv.Atoi(seg)
				if err != nil || i < 0 || i >= len(c) {
					return fail("points to nothing")
				}
				v = c[i]
			default:
				return fail("points to nothing")
			}
			norm += "/" + escape(seg)
		}
	}
	return norm, v, true
}

func escape(seg string) string {
	return strings.ReplaceAll(strings.ReplaceAll(seg, "~", "~0"), "/", "~1")
}

func where(ptr string) string {
	if ptr == "" {
		return "the top level"
	}
	return ptr
}

func clipRef(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// buildGraph builds the graph of the schema document doc and checks it: no
// subschema may reach itself through references without moving to a member
// or element of the value (the check would never end), and, in a model's
// schema (untrusted), every reference must point into the document and no
// subschema may weigh more than MaxWeight.
func buildGraph(doc any, untrusted bool) (*graph, error) {
	b := newBuilder(doc, untrusted)
	b.node("", doc, false)
	if b.err != nil {
		return nil, b.err
	}
	if b.opaque {
		return nil, nil
	}
	g := b.g
	ptrs := make([]string, len(g.nodes))
	for p, id := range b.ids {
		ptrs[id] = p
	}
	// Weights of the same-value edges, depth first, finding cycles.
	const (
		unseen = iota
		visiting
		done
	)
	state := make([]uint8, len(g.nodes))
	weight := make([]int, len(g.nodes))
	var visit func(id int, path []int) error
	visit = func(id int, path []int) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			cycle := []string{where(ptrs[id])}
			for i := len(path) - 2; i >= 0; i-- {
				cycle = append(cycle, where(ptrs[path[i]]))
				if path[i] == id {
					break
				}
			}
			return fmt.Errorf("at %s: a reference cycle (%s) checks the same place for ever: every \"$ref\" back to a schema it is part of must go through properties or items",
				where(ptrs[id]), strings.Join(reverse(cycle), " → "))
		}
		state[id] = visiting
		w := 1
		for _, e := range g.nodes[id].edges {
			if e.kind != sameValue {
				continue
			}
			if err := visit(e.target, append(path, e.target)); err != nil {
				return err
			}
			w = min(w+weight[e.target], MaxWeight+1)
		}
		weight[id], state[id] = w, done
		if untrusted && w > MaxWeight {
			return fmt.Errorf("at %s: the schema weighs more than %d: its allOf, anyOf, oneOf and $ref apply over %d checks to one place of the answer: write the schema out plainly, without references that repeat one another",
				where(ptrs[id]), MaxWeight, MaxWeight)
		}
		return nil
	}
	for id := range g.nodes {
		if err := visit(id, []int{id}); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func reverse(s []string) []string {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
	return s
}

// depth returns how deeply the objects and arrays of v nest, stopping
// above limit.
func depth(v any, limit int) int {
	if limit < 0 {
		return 0
	}
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e, limit-1))
			if d >= limit {
				break
			}
		}
	case []any:
		for _, e := range v {
			d = max(d, depth(e, limit-1))
			if d >= limit {
				break
			}
		}
	default:
		return 0
	}
	return d + 1
}

// workCheck is the running count of a value's checks against a graph.
type workCheck struct {
	g     *graph
	ctx   context.Context
	left  int // work units left
	steps int
	err   error
}

// errValidationWork reports a value whose checks against a model's schema
// would pass MaxValidationWork.
var errValidationWork = fmt.Errorf("checking this value against the schema takes more than %d steps: make the value smaller, or the schema simpler (fewer allOf, anyOf and $ref that apply to every element)", MaxValidationWork)

// walk counts the checks of v against node id, and stops at the bound or
// when the context ends.
func (w *workCheck) walk(id int, v any) {
	if w.err != nil {
		return
	}
	n := &w.g.nodes[id]
	cost := n.cost
	if s, ok := v.(string); ok && n.scans {
		cost += len(s) / 64
	}
	if w.left -= max(cost, 1); w.left < 0 {
		w.err = errValidationWork
		return
	}
	if w.steps++; w.steps%1024 == 0 {
		if err := w.ctx.Err(); err != nil {
			w.err = err
			return
		}
	}
	for _, e := range n.edges {
		switch e.kind {
		case sameValue:
			w.walk(e.target, v)
		case member:
			if m, ok := v.(map[string]any); ok {
				if mv, ok := m[e.key]; ok {
					w.walk(e.target, mv)
				}
			}
		case allMembers:
			if m, ok := v.(map[string]any); ok {
				for _, mv := range m {
					w.walk(e.target, mv)
				}
			}
		case allKeys:
			if m, ok := v.(map[string]any); ok {
				for k := range m {
					w.walk(e.target, k)
				}
			}
		case element:
			if a, ok := v.([]any); ok && e.index < len(a) {
				w.walk(e.target, a[e.index])
			}
		case allElements:
			if a, ok := v.([]any); ok {
				for _, av := range a {
					w.walk(e.target, av)
				}
			}
		}
		if w.err != nil {
			return
		}
	}
}
