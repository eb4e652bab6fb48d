package temporal

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
)

// Dial connects to the Temporal server at hostPort, in namespace (the
// default namespace when empty). The connection is checked at once: a
// server that is down is an error naming the address. The client logs
// warnings and errors through logger (slog.Default when nil).
func Dial(ctx context.Context, hostPort, namespace string, logger *slog.Logger) (client.Client, error) {
	if logger == nil {
		logger = slog.Default()
	}
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  hostPort,
		Namespace: namespace,
		Logger:    log.NewStructuredLogger(logger),
	})
	if err != nil {
		return nil, fmt.Errorf("temporal: cannot reach the server at %s (is it running? start one with `cd internal/devserver && go run .` in the temporal module): %w", hostPort, err)
	}
	return c, nil
}
