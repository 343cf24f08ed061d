package main

import (
	"context"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/transfer"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	// tenantSessionsTotal bounds a tenant's sessions across all nodes
	// (the scheduler's).
	tenantSessionsTotal int
	replicas            int
	maxAge              time.Duration
	maxBytes            string
	// noAuth runs the embedded server without authentication (loopback
	// only); creds and nodeCreds are the engine's and the in-process
	// node's credentials against an external server (--nats-url).
	noAuth           bool
	creds, nodeCreds string
	tlsCert, tlsKey  string
	tlsCA            string
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg serveConfig
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&cfg.stateDir, "state-dir", auth.DefaultStateDir(), "directory for JetStream data")
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
	fs.IntVar(&cfg.tenantSessionsTotal, "tenant-sessions-total", 0, "most sessions of one tenant across all nodes (0: no limit but each node's)")
	fs.IntVar(&cfg.capture, "capture-output", 0, "capture up to N bytes of exec stdout/stderr in events (0: byte counts only)")
	fs.IntVar(&cfg.replicas, "replicas", 1, "replicas of the events stream and buckets (use 3 on a cluster)")
	fs.DurationVar(&cfg.maxAge, "events-max-age", 0, "drop events older than this (0: keep forever)")
	fs.StringVar(&cfg.maxBytes, "events-max-bytes", "", "bound the events stream's size, e.g. 10g (default: unbounded)")
	fs.BoolVar(&cfg.noAuth, "no-auth", false, "embedded server without authentication (refused unless --listen is loopback)")
	fs.StringVar(&cfg.creds, "creds", os.Getenv("PADDOCK_CREDS"), "with --nats-url: the engine's credentials file (env PADDOCK_CREDS)")
	fs.StringVar(&cfg.nodeCreds, "node-creds", "", "with --nats-url: the in-process node's credentials file")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "serve the embedded server's clients over TLS with this certificate (PEM)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fs.StringVar(&cfg.tlsCA, "tls-ca", os.Getenv("PADDOCK_TLS_CA"), "with --nats-url: CA that signed the server's certificate (env PADDOCK_TLS_CA)")
	policy := policyflags.Register(fs)
	if _, _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if err := cfg.checkAuth(); err != nil {
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
	if cfg.capture < 0 || cfg.tenantConcurrent < 0 || cfg.tenantSessions < 0 || cfg.tenantSessionsTotal < 0 || cfg.replicas < 0 {
		return usageErr("--capture-output, --tenant-concurrency, --tenant-sessions, --tenant-sessions-total and --replicas take no negative numbers")
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
			func(lc fx.Lifecycle) (conns, error) { return connect(lc, cfg, brokerCfg, logger, &clientURL) },
			func(c conns) *nats.Conn { return c.engine },
			func(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) },
			func(js jetstream.JetStream) *events.Log { return events.NewLog(js, "", "") },
			func(nc *nats.Conn, log *events.Log) (*scheduler.Scheduler, error) {
				return scheduler.New(nc, log, scheduler.Config{TenantSessions: cfg.tenantSessionsTotal}, logger)
			},
		),
		fx.Invoke(func(lc fx.Lifecycle, c conns, js jetstream.JetStream, sch *scheduler.Scheduler) error {
			lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
				if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: cfg.replicas, MaxAge: cfg.maxAge, MaxBytes: maxBytes}); err != nil {
					return err
				}
				_, err := objectstore.Ensure(ctx, js, objectstore.Config{Replicas: cfg.replicas})
				return err
			}})
			lc.Append(fx.StartStopHook(sch.Start, sch.Close))
			var xfer *transfer.Service
			lc.Append(fx.Hook{
				OnStart: func(ctx context.Context) error {
					store, err := objectstore.Open(ctx, js, "")
					if err != nil {
						return err
					}
					xfer = transfer.New(c.engine, store, transfer.Config{}, logger)
					return xfer.Start(ctx)
				},
				OnStop: func(context.Context) error {
					if xfer != nil {
						xfer.Close()
					}
					return nil
				},
			})
			if cfg.noLocalNode {
				return nil
			}
			rts, closeRuntimes, err := runtimes.Open(ctx, runtimes.Options{Mode: cfg.runtime, Node: cfg.nodeID, LocalDir: cfg.sandboxDir, Loopback: cfg.loopback()}, logger)
			if err != nil {
				return err
			}
			lc.Append(fx.StopHook(closeRuntimes))
			njs, err := jetstream.New(c.node)
			if err != nil {
				return err
			}
			agent, err := nodes.New(c.node, events.NewLog(njs, "", ""), nodes.Config{
				ID: cfg.nodeID, Capture: nodes.Capture{Limit: cfg.capture}, CompressSnapshots: cfg.zstdSnaps,
				TenantConcurrent: cfg.tenantConcurrent, TenantSessions: cfg.tenantSessions, Policy: pol,
				Signer: c.nodeSigner,
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
	bc = broker.Config{StoreDir: filepath.Join(cfg.stateDir, "jetstream"), Host: host, Port: port, TLSCert: cfg.tlsCert, TLSKey: cfg.tlsKey}
	if cfg.sync != "always" {
		d, err := time.ParseDuration(cfg.sync)
		if err != nil || d <= 0 {
			return bc, usageErr(`--sync %q is neither "always" nor a positive duration`, cfg.sync)
		}
		bc.SyncInterval = d
	}
	return bc, nil
}

// conns are the engine's connection and its in-process node's (the same
// connection when there is no auth), and the key the node signs with (nil:
// the node makes one).
type conns struct {
	engine, node *nats.Conn
	nodeSigner   events.Signer
}

// checkAuth refuses an embedded server that would listen beyond loopback
// without authentication, and credentials flags that do not apply.
func (cfg serveConfig) checkAuth() error {
	if cfg.natsURL == "" {
		if cfg.noAuth && !runtimes.IsLoopback(cfg.listen) {
			return usageErr("--no-auth with --listen %s: an embedded server reachable from other machines must authenticate its clients", cfg.listen)
		}
		if cfg.creds != "" && os.Getenv("PADDOCK_CREDS") != cfg.creds || cfg.nodeCreds != "" {
			return usageErr("--creds and --node-creds are for --nats-url; the embedded server makes its own credentials under --state-dir")
		}
	} else if cfg.noAuth || cfg.tlsCert != "" {
		return usageErr("--no-auth, --tls-cert and --tls-key configure the embedded server; the server at --nats-url has its own config (engine auth server-config)")
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return usageErr("--tls-cert and --tls-key go together")
	}
	return nil
}

// connect embeds a broker (unless --nats-url) and returns the engine's and
// the in-process node's connections; the lifecycle closes them. With auth,
// the embedded server loads the auth store under the state dir (made on
// first start) and reloads it when `engine auth` changes it. It stores
// the URL clients reach the server at in clientURL.
func connect(lc fx.Lifecycle, cfg serveConfig, bc broker.Config, logger *slog.Logger, clientURL *string) (conns, error) {
	if cfg.natsURL != "" {
		return connectExternal(lc, cfg)
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return conns{}, fmt.Errorf("state dir: %w", err)
	}
	var store *auth.Store
	if !cfg.noAuth {
		store = auth.Open(auth.DirIn(cfg.stateDir))
		node := cfg.nodeID
		if cfg.noLocalNode {
			node = ""
		}
		if err := store.Bootstrap(node); err != nil {
			return conns{}, fmt.Errorf("auth store: %w", err)
		}
		bc.AccountsFile = store.ConfigPath()
	}
	b, err := broker.Start(bc)
	if err != nil {
		return conns{}, err
	}
	var c conns
	closeAll := func() {
		for _, nc := range []*nats.Conn{c.node, c.engine} {
			if nc != nil {
				nc.Close()
			}
		}
		b.Shutdown()
	}
	inProcess := func(name string) (*nats.Conn, *auth.Creds, error) {
		if store == nil {
			nc, err := b.Connect()
			return nc, nil, err
		}
		creds, err := auth.LoadCreds(store.CredsPath(name))
		if err != nil {
			return nil, nil, fmt.Errorf("auth store: %w", err)
		}
		nc, err := b.Connect(append(creds.Options(), nats.Name("paddock-"+name))...)
		return nc, creds, err
	}
	if c.engine, _, err = inProcess("engine"); err != nil {
		closeAll()
		return conns{}, err
	}
	c.node = c.engine
	if store != nil && !cfg.noLocalNode {
		var creds *auth.Creds
		if c.node, creds, err = inProcess(cfg.nodeID); err != nil {
			closeAll()
			return conns{}, err
		}
		if c.nodeSigner, err = creds.KeyPair(); err != nil {
			closeAll()
			return conns{}, err
		}
	}
	*clientURL = b.ClientURL()
	logger.Info("embedded NATS listening", "url", b.ClientURL(), "jetstream", bc.StoreDir, "sync_always", bc.SyncInterval == 0, "auth", store != nil)
	if store != nil {
		logger.Info("credentials", "admin", store.CredsPath("admin"), "client_default", store.CredsPath("client-default"), "auth_dir", store.Dir())
	}
	stopWatch := func() {}
	if store != nil {
		stopWatch = watchConfig(store.ConfigPath(), b, logger)
	}
	lc.Append(fx.StopHook(func() { stopWatch(); closeAll() }))
	return c, nil
}

// connectExternal connects the engine and its in-process node to the
// server at --nats-url with their credentials files.
func connectExternal(lc fx.Lifecycle, cfg serveConfig) (conns, error) {
	dialAs := func(name, credsPath string) (*nats.Conn, *auth.Creds, error) {
		if credsPath == "" {
			credsPath = "none"
		}
		return client.Connect(client.ConnectOptions{URL: cfg.natsURL, Creds: credsPath, TLSCA: cfg.tlsCA, Name: name, Extra: []nats.Option{nats.MaxReconnects(-1)}})
	}
	var c conns
	var err error
	if c.engine, _, err = dialAs("paddock-engine", cfg.creds); err != nil {
		return conns{}, err
	}
	c.node = c.engine
	if cfg.nodeCreds != "" && !cfg.noLocalNode {
		var creds *auth.Creds
		if c.node, creds, err = dialAs("paddock-node-"+cfg.nodeID, cfg.nodeCreds); err != nil {
			c.engine.Close()
			return conns{}, err
		}
		if c.nodeSigner, err = creds.KeyPair(); err != nil {
			c.engine.Close()
			c.node.Close()
			return conns{}, err
		}
	}
	lc.Append(fx.StopHook(func() {
		c.engine.Close()
		c.node.Close()
	}))
	return c, nil
}

// watchConfig reloads the embedded server when the auth store's config
// changes (engine auth add/rm) and returns the function that stops
// watching. It polls the file's mtime: a change shows within a second.
func watchConfig(path string, b *broker.Broker, logger *slog.Logger) (stop func()) {
	stat := func() time.Time {
		fi, err := os.Stat(path)
		if err != nil {
			return time.Time{}
		}
		return fi.ModTime()
	}
	last := stat()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if m := stat(); !m.Equal(last) {
				last = m
				if err := b.Reload(); err != nil {
					logger.Error("auth config reload failed; the server keeps the previous one", "err", err)
					continue
				}
				logger.Info("auth config reloaded", "file", path)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
