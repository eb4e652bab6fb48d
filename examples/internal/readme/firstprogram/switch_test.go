package main

import (
	"log"
	"os"
	"strings"
	"testing"

	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/provider/openai"
)

// switchLine is the commented line of the first program that switches it to
// a real model; onOpenAI is that line uncommented where the program has it.
const switchLine = "\t// model, err := openai.New(); if err != nil { log.Fatal(err) }\n"

func onOpenAI() {
	var model provider.Provider = fake.NewProvider()
	model, err := openai.New()
	if err != nil {
		log.Fatal(err)
	}
	_ = model
}

// The line the README tells a reader to uncomment compiles in place: it is
// onOpenAI's, which the compiler checks, right after the scripted model.
func TestSwitchLineCompiles(t *testing.T) {
	_ = onOpenAI
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "var model provider.Provider = fake.NewProvider(")
	j := strings.Index(string(src), switchLine)
	if i < 0 || j < i {
		t.Fatalf("main.go has no line %q after the scripted model's declaration", strings.TrimSpace(switchLine))
	}
}
