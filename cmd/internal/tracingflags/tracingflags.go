// Package tracingflags registers the tracing flag that agent-node and
// engine serve share (--otlp-endpoint) and builds the process's tracer
// provider from it, shut down (its last spans flushed) when the process
// stops.
package tracingflags

import (
	"context"
	"os"

	flag "github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/paddock-dev/paddock/tracing"
)

// Flags holds the parsed tracing flag.
type Flags struct {
	endpoint string
}

// Register adds --otlp-endpoint to fs (default: env PADDOCK_OTLP_ENDPOINT,
// else off).
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.endpoint, "otlp-endpoint", os.Getenv("PADDOCK_OTLP_ENDPOINT"),
		"export OpenTelemetry traces over OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318 (env PADDOCK_OTLP_ENDPOINT; empty: tracing off)")
	return f
}

// Config returns the tracing config of service (its service.name).
func (f *Flags) Config(service string) tracing.Config {
	return tracing.Config{Endpoint: f.endpoint, Service: service}
}

// Validate checks the flag.
func (f *Flags) Validate() error { return f.Config("").Validate() }

// Provider returns the tracer provider of service and appends its shutdown
// to lc: nil (tracing off) without --otlp-endpoint.
func (f *Flags) Provider(ctx context.Context, lc fx.Lifecycle, service string) (trace.TracerProvider, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	tp, shutdown, err := tracing.NewProvider(ctx, f.Config(service))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(shutdown))
	return tp, nil
}
