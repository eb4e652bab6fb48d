// Package jsonschema compiles JSON Schema documents and checks JSON values
// against them, in messages a model can act on, within bounds that keep a
// hostile schema from hanging the program. It is deputy's one JSON Schema
// engine: typed tools (tool.New) derive their parameters with For, a
// sub-agent's answer is checked against its output schema, and an MCP
// server's input schemas and a person's answer to an interrupt are
// compiled as untrusted.
//
//	s, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`))
//	if err != nil {
//		return err
//	}
//	err = s.Validate([]byte(`{"city":7}`)) // at /city: got number, want string
//
// # Compiling
//
// A Schema is compiled once and is then safe for concurrent use; Raw
// returns the document it was compiled from, the one a model is shown.
// Compile is for schemas the program's author wrote: tool parameters, an
// output schema given in Go. For reflects the schema of a Go type and
// compiles it: field names follow the json tags, fields without omitempty
// are required, and unknown properties are refused.
//
// CompileUntrusted is for a schema from outside the program: one a model
// wrote, an MCP server's, one an HTTP client echoes. It refuses a schema
// beyond the bounds below, with an error that says which bound and how to
// fix the schema, and its checks count their work before doing it.
//
// Both read draft 2020-12 unless the document names another draft, and
// neither loads a file or a URL: a "$ref" points into the document, or,
// in a trusted schema, to a JSON Schema meta-schema. A schema whose
// references check the same place of a value for ever, such as
// {"$ref":"#"}, is refused by both.
//
// # Validating
//
// Validate checks JSON text (ValidateText the same held in a string), and
// ValidateValue a value decoded by encoding/json into an any. An object
// that holds one key twice is refused, so that what a program reads from
// the text is what was checked, and so is a number beyond a 64-bit
// float's range. The Context forms, ValidateContext and
// ValidateValueContext, stop when their context ends, with an error that
// wraps the context's error.
//
// # Work bounds
//
// A schema can make a validator do work exponential in its size. A schema
// compiled with CompileUntrusted is at most MaxUntrustedBytes of text,
// nests at most MaxUntrustedDepth deep, refers only to its own parts
// ("#/$defs/name") and weighs at most MaxWeight: the subschemas that check
// one place of a value through allOf, anyOf, oneOf, not, if/then/else,
// dependentSchemas and "$ref". Each check against it is counted first and
// refused beyond MaxValidationWork, which keeps the costliest check it
// lets through to a few hundred milliseconds.
//
// # Validation errors
//
// A value that does not match is reported as a *ValidationError: one
// problem per offending place, named by its JSON pointer ("at /city: got
// number, want string"), sorted so that the same mistake reads the same
// every time. It lists the first twenty problems and counts the others
// (Omitted). Errors about the schema itself, or about JSON text that does
// not parse, are plain errors.
package jsonschema
