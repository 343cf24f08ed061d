package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/cmd/internal/policyflags"
	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/scheduler"
)

// serveConfig is what `engine serve` is told by its flags.
type serveConfig struct {
	stateDir    string
	sandboxDir  string
	listen      string
	sync        string
	natsURL     string
	noLocalNode bool
	nodeID      string
	runtime     string
	zstdSnaps   bool
	capture     int
	// tenantConcurrent and tenantSessions are the in-process node's fair
	// share (nodes.Config).
	tenantConcurrent, tenantSessions int
	replicas                         int
	maxAge                           time.Duration
	maxBytes                         string
}

// defaultStateDir is $XDG_DATA_HOME/paddock, else ~/.local/share/paddock.
func defaultStateDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "paddock")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "paddock")
	}
	return filepath.Join(os.TempDir(), "paddock")
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg serveConfig
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&cfg.stateDir, "state-dir", defaultStateDir(), "directory for JetStream data")
	fs.StringVar(&cfg.sandboxDir, "sandbox-dir", defaultSandboxDir(), "directory for local-runtime sandboxes (never inside --state-dir)")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:4222", "client listen address of the embedded NATS server")
	fs.StringVar(&cfg.sync, "sync", "always", `JetStream fsync: "always" (before every ack) or an interval such as 1s or 2m`)
	fs.StringVar(&cfg.natsURL, "nats-url", "", "use this NATS server instead of embedding one")
	fs.BoolVar(&cfg.noLocalNode, "no-local-node", false, "do not run a node agent in this process")
	fs.StringVar(&cfg.nodeID, "node-id", hostNodeID(), "id of the in-process node")
	fs.BoolVar(&cfg.zstdSnaps, "zstd-snapshots", false, "the in-process node compresses workspace snapshots with zstd")
	fs.StringVar(&cfg.runtime, "runtime", "auto", "runtime of the in-process node: "+runtimes.Modes+" (auto: Docker when its daemon answers)")
	fs.IntVar(&cfg.tenantConcurrent, "tenant-concurrency", 0, "most commands of one tenant in flight on the in-process node (default: a quarter of 256)")
	fs.IntVar(&cfg.tenantSessions, "tenant-sessions", 0, "most sessions of one tenant on the in-process node (default: its capacity)")
	fs.IntVar(&cfg.capture, "capture-output", 0, "capture up to N bytes of exec stdout/stderr in events (0: byte counts only)")
	fs.IntVar(&cfg.replicas, "replicas", 1, "replicas of the events stream and buckets (use 3 on a cluster)")
	fs.DurationVar(&cfg.maxAge, "events-max-age", 0, "drop events older than this (0: keep forever)")
	fs.StringVar(&cfg.maxBytes, "events-max-bytes", "", "bound the events stream's size, e.g. 10g (default: unbounded)")
	policy := policyflags.Register(fs)
	if _, _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	pol, err := policy.Policy()
	if err != nil {
		return usageErr("%v", err)
	}
	var maxBytes int64
	if cfg.maxBytes != "" {
		var err error
		if maxBytes, err = bytesize.Parse(cfg.maxBytes); err != nil {
			return err
		}
	}
	if err := runtimes.Check(cfg.runtime); err != nil {
		return usageErr("%v", err)
	}
	if err := cfg.checkDirs(); err != nil {
		return err
	}
	if cfg.capture < 0 || cfg.tenantConcurrent < 0 || cfg.tenantSessions < 0 || cfg.replicas < 0 {
		return usageErr("--capture-output, --tenant-concurrency, --tenant-sessions and --replicas take no negative numbers")
	}
	brokerCfg, err := cfg.brokerConfig()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// clientURL is where clients reach the NATS server the engine uses;
	// connect fills it in once the embedded server listens.
	clientURL := cfg.natsURL
	app := fx.New(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.Supply(cfg, logger),
		fx.Provide(
			func(lc fx.Lifecycle) (*nats.Conn, error) { return connect(lc, cfg, brokerCfg, logger, &clientURL) },
			func(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) },
			func(js jetstream.JetStream) *events.Log { return events.NewLog(js, "", "") },
			func(nc *nats.Conn, log *events.Log) (*scheduler.Scheduler, error) {
				return scheduler.New(nc, log, scheduler.Config{}, logger)
			},
		),
		fx.Invoke(func(lc fx.Lifecycle, nc *nats.Conn, js jetstream.JetStream, log *events.Log, sch *scheduler.Scheduler) error {
			lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
				if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: cfg.replicas, MaxAge: cfg.maxAge, MaxBytes: maxBytes}); err != nil {
					return err
				}
				_, err := objectstore.Ensure(ctx, js, objectstore.Config{Replicas: cfg.replicas})
				return err
			}})
			lc.Append(fx.StartStopHook(sch.Start, sch.Close))
			if cfg.noLocalNode {
				return nil
			}
			rts, closeRuntimes, err := runtimes.Open(ctx, runtimes.Options{Mode: cfg.runtime, Node: cfg.nodeID, LocalDir: cfg.sandboxDir, Loopback: cfg.loopback()}, logger)
			if err != nil {
				return err
			}
			lc.Append(fx.StopHook(closeRuntimes))
			agent, err := nodes.New(nc, log, nodes.Config{
				ID: cfg.nodeID, Capture: nodes.Capture{Limit: cfg.capture}, CompressSnapshots: cfg.zstdSnaps,
				TenantConcurrent: cfg.tenantConcurrent, TenantSessions: cfg.tenantSessions, Policy: pol,
			}, logger, rts...)
			if err != nil {
				return err
			}
			lc.Append(fx.Hook{OnStart: agent.Start, OnStop: agent.Close})
			return nil
		}),
		projectorModule(cfg),
		fx.StartTimeout(30*time.Second),
		fx.StopTimeout(40*time.Second),
	)
	if err := app.Err(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("paddock engine ready", "nats", clientURL, "state_dir", cfg.stateDir, "local_node", !cfg.noLocalNode)
	<-ctx.Done()
	logger.Info("paddock engine stopping")
	// Stopping gets its own bound: ctx is already done.
	stopCtx, cancel2 := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel2()
	return app.Stop(stopCtx)
}

// defaultSandboxDir is $XDG_CACHE_HOME/paddock/sandboxes (else
// ~/.cache/...): apart from the state dir, so no sandbox shares a
// directory tree with the JetStream files.
func defaultSandboxDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "paddock", "sandboxes")
	}
	return filepath.Join(os.TempDir(), "paddock-sandboxes")
}

// loopback reports whether the deployment is reachable only from this
// machine: the embedded server listens on loopback, or --nats-url names
// only loopback servers.
func (cfg serveConfig) loopback() bool {
	if cfg.natsURL != "" {
		return runtimes.URLIsLoopback(cfg.natsURL)
	}
	return runtimes.IsLoopback(cfg.listen)
}

// checkDirs refuses a sandbox dir inside the state dir (or the reverse).
func (cfg serveConfig) checkDirs() error {
	state, err1 := filepath.Abs(cfg.stateDir)
	sand, err2 := filepath.Abs(cfg.sandboxDir)
	if err1 != nil || err2 != nil {
		return usageErr("--state-dir or --sandbox-dir is not a usable path")
	}
	within := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+string(filepath.Separator)) }
	if within(sand, state) || within(state, sand) {
		return usageErr("--sandbox-dir %s and --state-dir %s overlap: local sandboxes must not share a tree with the JetStream files", sand, state)
	}
	return nil
}

func hostNodeID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "local"
	}
	return strings.NewReplacer(".", "-", " ", "-").Replace(h)
}

func (cfg serveConfig) brokerConfig() (broker.Config, error) {
	var bc broker.Config
	if cfg.natsURL != "" {
		return bc, nil
	}
	host, portStr, ok := strings.Cut(cfg.listen, ":")
	if !ok {
		return bc, usageErr("--listen %q is not HOST:PORT", cfg.listen)
	}
	var port int
	if _, err := fmt.Sscanf(portStr, "%d", &port); err != nil || port < 0 || port > 65535 {
		return bc, usageErr("--listen %q has no valid port", cfg.listen)
	}
	if port == 0 {
		port = -1 // a free port
	}
	bc = broker.Config{StoreDir: filepath.Join(cfg.stateDir, "jetstream"), Host: host, Port: port}
	if cfg.sync != "always" {
		d, err := time.ParseDuration(cfg.sync)
		if err != nil || d <= 0 {
			return bc, usageErr(`--sync %q is neither "always" nor a positive duration`, cfg.sync)
		}
		bc.SyncInterval = d
	}
	return bc, nil
}

// connect embeds a broker (unless --nats-url) and returns the engine's
// connection; the lifecycle closes both. It stores the URL clients reach the
// server at in clientURL.
func connect(lc fx.Lifecycle, cfg serveConfig, bc broker.Config, logger *slog.Logger, clientURL *string) (*nats.Conn, error) {
	if cfg.natsURL != "" {
		nc, err := nats.Connect(cfg.natsURL, nats.Name("paddock-engine"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", cfg.natsURL, err)
		}
		lc.Append(fx.StopHook(nc.Close))
		return nc, nil
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	b, err := broker.Start(bc)
	if err != nil {
		return nil, err
	}
	nc, err := b.Connect()
	if err != nil {
		b.Shutdown()
		return nil, err
	}
	*clientURL = b.ClientURL()
	logger.Info("embedded NATS listening", "url", b.ClientURL(), "jetstream", bc.StoreDir, "sync_always", bc.SyncInterval == 0)
	lc.Append(fx.StopHook(func() { nc.Close(); b.Shutdown() }))
	return nc, nil
}
