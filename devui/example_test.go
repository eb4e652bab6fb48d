package devui_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"

	"github.com/deputy-go/deputy/agent"
	"github.com/deputy-go/deputy/agui"
	"github.com/deputy-go/deputy/devui"
	"github.com/deputy-go/deputy/fake"
	"github.com/deputy-go/deputy/store"
	"github.com/deputy-go/deputy/store/memory"
)

// The viewer is mounted beside the AG-UI endpoint it shows; given the
// threads' store, it keeps the runs it starts, to redraw them later.
func ExampleNew() {
	st, err := store.New(memory.New())
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	h, err := agui.NewPerRequest(func(ctx context.Context, in *agui.RunInput) (agent.Agent, error) {
		return agent.NewReact(fake.NewProvider(fake.Text("Hello.")))
	}, agui.WithThreads(st))
	if err != nil {
		log.Fatal(err)
	}
	v, err := devui.New(h, devui.WithStore(st))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/agui", h)
	mux.Handle("/devui/", http.StripPrefix("/devui", v))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/devui/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	fmt.Println(regexp.MustCompile(`<title>(.*)</title>`).FindStringSubmatch(string(page))[1])
	// Output: deputy · run tree
}
