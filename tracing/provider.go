package tracing

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures the tracer provider of a process.
type Config struct {
	// Endpoint is the OTLP/HTTP endpoint spans are exported to, a URL
	// such as http://127.0.0.1:4318 (the path defaults to /v1/traces).
	// Empty: tracing is off.
	Endpoint string
	// Service is the service.name resource attribute (e.g. "paddock-engine").
	Service string
}

// Validate checks the config: the endpoint, when set, is an http or https
// URL with a host.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return fmt.Errorf("tracing: endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracing: endpoint %q: want an http:// or https:// URL with a host, such as http://127.0.0.1:4318", c.Endpoint)
	}
	return nil
}

// NewProvider returns the tracer provider cfg asks for and its shutdown,
// which flushes the spans not yet exported (bounded by its ctx) and is safe
// to call twice. With no endpoint it is the no-op provider. It fails when
// the config is invalid; the exporter connects lazily, so a collector that
// is down costs dropped spans, never a failed command.
func NewProvider(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Endpoint == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	endpoint := cfg.Endpoint
	if u, _ := url.Parse(endpoint); u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
		endpoint = u.String()
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	service := cfg.Service
	if service == "" {
		service = "paddock"
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	return tp, tp.Shutdown, nil
}
