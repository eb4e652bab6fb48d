package memory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
	"github.com/deputy-go/deputy/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend { return memory.New() })
}

func TestClosedBackendSaysSo(t *testing.T) {
	b := memory.New()
	b.Close()
	if _, err := b.Get(context.Background(), "k"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

// A store that needs no file: a conversation kept for the process's life.
func ExampleNew() {
	st, err := store.New(memory.New())
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.SaveConversation(ctx, "chat", []provider.Message{provider.UserMessage("hello")}, 0); err != nil {
		log.Fatal(err)
	}
	c, _ := st.Conversation(ctx, "chat")
	fmt.Println(len(c.Messages), c.Messages[0].Content, "version", c.Version)
	// Output: 1 hello version 1
}
