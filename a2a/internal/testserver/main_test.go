package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// The clerk does what the README promises, seen through the Go SDK's
// client: an echo streamed in pieces, a payment that waits for approval
// and runs once approved, and counts at /stats.
func TestClerk(t *testing.T) {
	c, err := newClerk()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	h, closeServer, err := handler(c, "http://"+hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = h
	hs.Start()
	defer hs.Close()
	defer closeServer()
	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Destroy()

	send := func(m *sdk.Message) (pieces int, last *sdk.TaskStatusUpdateEvent, answer string) {
		for ev, err := range client.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: m}) {
			if err != nil {
				t.Fatal(err)
			}
			switch e := ev.(type) {
			case *sdk.TaskArtifactUpdateEvent:
				pieces++
				if e.LastChunk {
					answer = e.Artifact.Parts[0].Text()
				}
			case *sdk.TaskStatusUpdateEvent:
				last = e
			}
		}
		return pieces, last, answer
	}

	pieces, last, answer := send(sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("hello there")))
	if last.Status.State != sdk.TaskStateCompleted || answer != "You said: hello there" || pieces < 3 {
		t.Errorf("echo: %s with %q in %d pieces, want completed with %q in pieces", last.Status.State, answer, pieces, "You said: hello there")
	}

	_, asked, _ := send(sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("pay 5")))
	if asked.Status.State != sdk.TaskStateInputRequired || c.transfers.Load() != 0 {
		t.Fatalf("pay: %s after %d transfers, want input-required before any", asked.Status.State, c.transfers.Load())
	}
	yes := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("yes"))
	yes.TaskID, yes.ContextID = asked.TaskID, asked.ContextID
	_, done, answer := send(yes)
	if done.Status.State != sdk.TaskStateCompleted || answer != "done: moved 5" {
		t.Errorf("approved: %s with %q, want completed with %q", done.Status.State, answer, "done: moved 5")
	}

	resp, err := http.Get(hs.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats map[string]int64
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if stats["transfers"] != 1 || stats["modelCalls"] != 3 || stats["cancellations"] != 0 {
		t.Errorf("stats %v, want 1 transfer, 3 model calls, no cancellation", stats)
	}
}
