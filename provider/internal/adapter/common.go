package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/deputy-go/deputy/provider"
)

// Common is what the options of every adapter set alike: admission control
// and its retries, the logger, the HTTP client and the bounds on replies.
// An adapter's config embeds it; its exported options call the setters
// below, which check the value and say what to pass instead.
type Common struct {
	Admission   *provider.Admission // WithAdmission
	NoAdmission bool                // WithoutAdmission
	MaxRetries  *int                // WithMaxRetries
	RetryTime   *time.Duration      // WithRetryTime
	Logger      *slog.Logger        // WithLogger
	HTTPClient  *http.Client        // WithHTTPClient
	Limits      Limits
}

// NewCommon returns the options' defaults.
func NewCommon() Common { return Common{Limits: DefaultLimits()} }

// SetAdmission is WithAdmission.
func (c *Common) SetAdmission(a *provider.Admission) error {
	if a == nil {
		return errors.New("WithAdmission(nil): pass an Admission (provider.NewAdmission), or WithoutAdmission to turn admission control off")
	}
	c.Admission = a
	return nil
}

// SetNoAdmission is WithoutAdmission.
func (c *Common) SetNoAdmission() error {
	c.NoAdmission = true
	return nil
}

// SetMaxRetries is WithMaxRetries.
func (c *Common) SetMaxRetries(n int) error {
	if n < 0 {
		return fmt.Errorf("WithMaxRetries(%d): the count cannot be negative; pass 0 to disable retries", n)
	}
	c.MaxRetries = &n
	return nil
}

// SetRetryTime is WithRetryTime.
func (c *Common) SetRetryTime(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("WithRetryTime(%v): the time cannot be negative; pass 0 to try a failing call once", d)
	}
	c.RetryTime = &d
	return nil
}

// SetLogger is WithLogger.
func (c *Common) SetLogger(l *slog.Logger) error {
	if l == nil {
		return errors.New("WithLogger(nil): pass a logger, or leave the option out to log nothing")
	}
	c.Logger = l
	return nil
}

// SetHTTPClient is WithHTTPClient.
func (c *Common) SetHTTPClient(hc *http.Client) error {
	if hc == nil {
		return errors.New("WithHTTPClient got a nil client; pass a client or leave the option out to use the SDK's default")
	}
	c.HTTPClient = hc
	return nil
}

// Admit settles the adapter's admission control from the options, as
// Admission does.
func (c *Common) Admit(name string) (adm *provider.Admission, sdkRetries int, set bool, err error) {
	return Admission(name, AdmissionConfig{
		Given: c.Admission, Off: c.NoAdmission, Retries: c.MaxRetries, RetryTime: c.RetryTime, Logger: c.Logger,
	})
}

// Calls sends an adapter's calls through its admission control, when it
// has one, or straight to the server.
type Calls struct {
	Admission *provider.Admission // nil: WithoutAdmission
	Model     string              // the model of a request that names none
	// Once makes one plain call; Streamed one streamed call, whose onDelta
	// may be nil.
	Once     func(ctx context.Context, req provider.Request) (provider.Response, error)
	Streamed func(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error)
}

// Complete is an adapter's provider.Provider.Complete.
func (c *Calls) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	if c.Admission == nil {
		return c.Once(ctx, req)
	}
	if req.Model == "" {
		req.Model = c.Model
	}
	return c.Admission.Call(ctx, req, nil, c.call)
}

// Stream is an adapter's provider.Streamer.Stream.
func (c *Calls) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	if c.Admission == nil {
		return c.Streamed(ctx, req, onDelta)
	}
	if req.Model == "" {
		req.Model = c.Model
	}
	if onDelta == nil {
		onDelta = func(provider.Delta) error { return nil }
	}
	return c.Admission.Call(ctx, req, onDelta, c.call)
}

// call makes one admitted call, streamed when onDelta is set.
func (c *Calls) call(ctx context.Context, req provider.Request, onDelta func(provider.Delta) error) (provider.Response, error) {
	if onDelta == nil {
		return c.Once(ctx, req)
	}
	return c.Streamed(ctx, req, onDelta)
}

// Status is the status code of r, or 0 when there is no response.
func Status(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}
