package store_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/sqlite"
)

// A conversation stored in one process is read in the next: here, a store
// closed and opened again on the same file.
func Example() {
	dir, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "deputy.db")
	ctx := context.Background()

	open := func() *store.Store {
		b, err := sqlite.Open(path)
		if err != nil {
			log.Fatal(err)
		}
		st, err := store.New(b)
		if err != nil {
			log.Fatal(err)
		}
		return st
	}

	st := open()
	c, _ := st.Conversation(ctx, "support/ticket-7") // none yet: version 0
	msgs := append(c.Messages, provider.UserMessage("My order is late."), provider.AssistantMessage("It ships today."))
	if err := st.SaveConversation(ctx, "support/ticket-7", msgs, c.Version); err != nil {
		log.Fatal(err)
	}
	st.Close()

	st = open()
	defer st.Close()
	c, _ = st.Conversation(ctx, "support/ticket-7")
	fmt.Println(len(c.Messages), "messages at version", c.Version)
	fmt.Println(c.Messages[1].Content)
	// Output:
	// 2 messages at version 1
	// It ships today.
}

// A lock taken in the store excludes other processes sharing it.
func ExampleStore_TryLock() {
	dir, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(dir)
	b, _ := sqlite.Open(filepath.Join(dir, "deputy.db"))
	st, _ := store.New(b)
	defer st.Close()
	ctx := context.Background()

	lk, _ := st.Lock(ctx, "expert/ledger")
	_, err := st.TryLock(ctx, "expert/ledger")
	fmt.Println(err != nil)
	lk.Unlock()
	lk, err = st.TryLock(ctx, "expert/ledger")
	fmt.Println(err)
	lk.Unlock()
	// Output:
	// true
	// <nil>
}
