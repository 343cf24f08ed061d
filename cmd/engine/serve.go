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
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/cmd/internal/consoleflags"
	"github.com/paddock-dev/paddock/cmd/internal/diskflags"
	"github.com/paddock-dev/paddock/cmd/internal/metricsflags"
	"github.com/paddock-dev/paddock/cmd/internal/policyflags"
	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/cmd/internal/tracingflags"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/transfer"
)

// serveConfig is what `engine serve` is told by its flags.
type serveConfig struct {
	docker      *runtimes.DockerFlags // the in-process node's supervisor and warm pools
	pythonImage bool                  // the in-process node makes and allows images.Python (firstrun.go)
	stateDir    string
	sandboxDir  string
	listen      string
	sync        string
	natsURL     string
	noLocalNode bool
	nodeID      string
	runtime     string
	zstdSnaps   bool
	// snapshotFormat and chunkCacheBytes are the in-process node's
	// snapshot format and chunk cache bound (0: none).
	snapshotFormat  string
	chunkCacheBytes int64
	capture         int
	// tenantConcurrent and tenantSessions are the in-process node's fair
	// share (nodes.Config).
	tenantConcurrent, tenantSessions int
	// tenantSessionsTotal bounds a tenant's sessions across all nodes
	// (the scheduler's).
	tenantSessionsTotal int
	// nodeTTL is how long a silent node counts as up before the engine
	// declares it lost; autoResume is the policy for lost sessions.
	nodeTTL    time.Duration
	autoResume string
	replicas   int
	maxAge     time.Duration
	// eventPartitions is the number of event partitions a new deployment
	// gets (0: what the deployment has, 1 for a new one).
	eventPartitions int
	// partitionLeaseTTL is the TTL of the partition leases by which the
	// engines share the projectors (0: no leases, every engine projects
	// every partition).
	partitionLeaseTTL time.Duration
	storage           storageFlags
	disk              *diskflags.Flags
	// diskLevels are the free-space thresholds the disk flags give.
	diskLevels storage.Thresholds
	// natsDebug and natsTrace turn on the embedded server's debug and
	// protocol trace lines (at DEBUG in the engine's log).
	natsDebug, natsTrace bool
	// gcEvery is how often the engine sweeps the workspace bucket with
	// the retention policy (0: never).
	gcEvery   time.Duration
	retention retention.Policy
	// noAuth runs the embedded server without authentication (loopback
	// only); creds and nodeCreds are the engine's and the in-process
	// node's credentials against an external server (--nats-url).
	noAuth           bool
	creds, nodeCreds string
	tlsCert, tlsKey  string
	tlsCA            string
	// clusterPorts are more ports of the NATS cluster no egress allow
	// list reaches (nodes.EgressConfig.ClusterPorts).
	clusterPorts []int
	// metrics is what the engine, its scheduler, projector and in-process
	// node record into (nil: --metrics-addr not set).
	metrics *metrics.Metrics
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
	fs.StringVar(&cfg.snapshotFormat, "snapshot-format", "", "format the in-process node persists: manifest (content-addressed; the default) or tar (the default with --zstd-snapshots); both are restored")
	fs.Int64Var(&cfg.chunkCacheBytes, "chunk-cache-bytes", nodes.DefaultChunkCacheBytes, "bound of the in-process node's snapshot chunk cache under --state-dir/chunks (0: no cache)")
	fs.StringVar(&cfg.runtime, "runtime", "auto", "runtime of the in-process node: "+runtimes.Modes+" (auto: Docker when its daemon answers)")
	fs.IntVar(&cfg.tenantConcurrent, "tenant-concurrency", 0, "most commands of one tenant in flight on the in-process node (default: a quarter of 256)")
	fs.IntVar(&cfg.tenantSessions, "tenant-sessions", 0, "most sessions of one tenant on the in-process node (default: its capacity)")
	fs.IntVar(&cfg.tenantSessionsTotal, "tenant-sessions-total", 0, "most sessions of one tenant across all nodes (0: no limit but each node's)")
	fs.IntVar(&cfg.capture, "capture-output", 0, "capture up to N bytes of exec stdout/stderr in events (0: byte counts only)")
	fs.DurationVar(&cfg.nodeTTL, "node-ttl", 10*time.Second, "a node silent this long (no heartbeat) is declared lost: its open operations fail, its sessions become lost")
	fs.StringVar(&cfg.autoResume, "auto-resume", "off", `"lost": resume a lost node's sessions (those with a snapshot) on nodes that are up; "off": leave them lost until resumed`)
	fs.IntVar(&cfg.replicas, "replicas", 1, "replicas of the events stream and buckets (use 3 on a cluster)")
	fs.DurationVar(&cfg.maxAge, "events-max-age", 0, "drop events older than this (0: keep forever)")
	fs.IntVar(&cfg.eventPartitions, "event-partitions", 0, fmt.Sprintf("streams the session events are spread over, fixed when the deployment is made (1..%d; 0: what the deployment has, 1 for a new one); see docs/scale.md", events.MaxPartitions))
	fs.DurationVar(&cfg.partitionLeaseTTL, "partition-lease-ttl", projector.DefaultLeaseTTL, fmt.Sprintf("the engines sharing a deployment divide its event partitions' projectors by leases of this TTL (at least %s; a dead engine's partitions are taken over within it; 0: no leases, every engine projects every partition); see docs/scale.md", projector.MinLeaseTTL))
	cfg.storage.register(fs)
	cfg.disk = diskflags.Register(fs)
	fs.BoolVar(&cfg.natsDebug, "nats-debug", false, "log the embedded NATS server's debug lines")
	fs.BoolVar(&cfg.natsTrace, "nats-trace", false, "log the embedded NATS server's protocol trace (verbose)")
	fs.BoolVar(&cfg.noAuth, "no-auth", false, "embedded server without authentication (refused unless --listen is loopback)")
	fs.StringVar(&cfg.creds, "creds", os.Getenv("PADDOCK_CREDS"), "with --nats-url: the engine's credentials file (env PADDOCK_CREDS)")
	fs.StringVar(&cfg.nodeCreds, "node-creds", "", "with --nats-url: the in-process node's credentials file")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "serve the embedded server's clients over TLS with this certificate (PEM)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fs.StringVar(&cfg.tlsCA, "tls-ca", os.Getenv("PADDOCK_TLS_CA"), "with --nats-url: CA that signed the server's certificate (env PADDOCK_TLS_CA)")
	clusterPorts := fs.String("egress-cluster-ports", "", "more ports of the NATS cluster (route, leafnode, monitoring; comma separated) that no egress allow list reaches at a private address; the embedded server's, the --nats-url ones and NATS's defaults are refused already")
	fs.DurationVar(&cfg.gcEvery, "gc-interval", time.Hour, "sweep the workspace bucket this often with the retention flags (engine gc does one sweep; 0: never)")
	retentionFlags := registerRetention(fs)
	metricsFlags := metricsflags.Register(fs)
	consoleFlags := consoleflags.Register(fs)
	policy := policyflags.Register(fs)
	cfg.docker = runtimes.RegisterDockerFlags(fs)
	registerFirstRunFlags(fs, &cfg)
	traces := tracingflags.Register(fs)
	jsonLog := fs.Bool("json", false, "log JSON lines on stderr (log/slog's JSON handler)")
	configFile := configFlag(fs)
	if _, _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if _, err := applyConfig(fs, *configFile); err != nil {
		return err
	}
	met, err := metricsFlags.Open()
	if err != nil {
		return err
	}
	cfg.metrics = met
	if cfg.retention, err = retentionFlags.policy(); err != nil {
		return err
	}
	if cfg.gcEvery < 0 {
		return usageErr("--gc-interval %s is negative", cfg.gcEvery)
	}
	if cfg.clusterPorts, err = egress.ParsePorts(*clusterPorts); err != nil {
		return fmt.Errorf("--egress-cluster-ports: %w", err)
	}
	if err := cfg.checkAuth(); err != nil {
		return err
	}
	if err := consoleFlags.Check(); err != nil {
		return err
	}
	if err := traces.Validate(); err != nil {
		return usageErr("--otlp-endpoint: %v", err)
	}
	pol, err := policy.Policy()
	if err != nil {
		return usageErr("%v", err)
	}
	pol = cfg.allowPythonImage(pol)
	if pol.MaxDiskBytes > 0 && cfg.docker.DefaultDiskBytes > pol.MaxDiskBytes {
		return usageErr("--default-disk %d is over --max-disk %d", cfg.docker.DefaultDiskBytes, pol.MaxDiskBytes)
	}
	maxStore, asked, err := cfg.storage.parse()
	if err != nil {
		return err
	}
	if maxStore > 0 && cfg.natsURL != "" {
		return usageErr("--max-store sizes the embedded server's store; the server at --nats-url has its own (max_file_store)")
	}
	if cfg.autoResume != "off" && cfg.autoResume != "lost" {
		return usageErr(`--auto-resume takes "off" or "lost", not %q`, cfg.autoResume)
	}
	if cfg.nodeTTL < 3*time.Second {
		return usageErr("--node-ttl %s: at least 3s, longer than a missed heartbeat or two (nodes heartbeat every 2s; the default is 10s)", cfg.nodeTTL)
	}
	if err := runtimes.Check(cfg.runtime); err != nil {
		return usageErr("%v", err)
	}
	if err := cfg.checkDirs(); err != nil {
		return err
	}
	if cfg.diskLevels, err = cfg.disk.Thresholds(); err != nil {
		return err
	}
	if err := events.ValidatePartitions(cfg.eventPartitions); err != nil {
		return usageErr("--event-partitions: %v", err)
	}
	if cfg.partitionLeaseTTL != 0 {
		if err := (projector.LeaseConfig{TTL: cfg.partitionLeaseTTL}).Validate(); err != nil {
			return usageErr("--partition-lease-ttl: %v", err)
		}
	}
	if cfg.capture < 0 || cfg.tenantConcurrent < 0 || cfg.tenantSessions < 0 || cfg.tenantSessionsTotal < 0 || cfg.replicas < 0 {
		return usageErr("--capture-output, --tenant-concurrency, --tenant-sessions, --tenant-sessions-total and --replicas take no negative numbers")
	}
	brokerCfg, err := cfg.brokerConfig()
	if err != nil {
		return err
	}
	brokerCfg.MaxStore = maxStore
	level := slog.LevelInfo
	if cfg.natsDebug || cfg.natsTrace {
		level = slog.LevelDebug
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if *jsonLog {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	logger := slog.New(handler)
	brokerCfg.Logger, brokerCfg.Debug, brokerCfg.Trace = logger, cfg.natsDebug, cfg.natsTrace

	// clientURL is where clients reach the NATS server the engine uses;
	// connect fills it in once the embedded server listens.
	clientURL := cfg.natsURL
	app := fx.New(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.Supply(cfg, logger),
		// The metrics endpoint starts first and stops last.
		fx.Invoke(func(lc fx.Lifecycle) { metricsFlags.Serve(lc, cfg.metrics, logger) }),
		fx.Provide(
			func(lc fx.Lifecycle) (conns, error) { return connect(lc, cfg, brokerCfg, logger, &clientURL) },
			func(c conns) *nats.Conn { return c.engine },
			func(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) },
			func(js jetstream.JetStream) *events.Log { return events.NewLog(js, "", "") },
			func(lc fx.Lifecycle) (trace.TracerProvider, error) { return traces.Provider(ctx, lc, "paddock-engine") },
			func(c conns, nc *nats.Conn, log *events.Log, tp trace.TracerProvider) (*scheduler.Scheduler, error) {
				return scheduler.New(nc, log, scheduler.Config{
					TenantSessions: cfg.tenantSessionsTotal, NodeTTL: cfg.nodeTTL, AutoResume: cfg.autoResume == "lost",
					Name: c.engineName, Signer: c.engineSigner, Metrics: cfg.metrics, TracerProvider: tp,
				}, logger)
			},
		),
		fx.Invoke(func(lc fx.Lifecycle, c conns, js jetstream.JetStream, sch *scheduler.Scheduler, tp trace.TracerProvider) error {
			plan := provision.Plan{Replicas: cfg.replicas, MaxAge: cfg.maxAge, DropOldest: cfg.storage.dropOldest, Asked: asked, Embedded: c.maxStore, Partitions: cfg.eventPartitions}
			lc.Append(fx.Hook{OnStart: func(ctx context.Context) error { return plan.EnsureStreams(ctx, js, logger) }})
			mon, err := storage.NewMonitor(js, storage.MonitorConfig{Streams: provision.Streams(), List: func(ctx context.Context) ([]string, error) { return provision.StreamsOf(ctx, js) }}, logger)
			if err != nil {
				return err
			}
			lc.Append(fx.Hook{OnStart: mon.Start, OnStop: mon.Close})
			lc.Append(fx.StartStopHook(sch.Start, sch.Close))
			if err := watchCluster(cfg.metrics, js, sch, c.maxStore, cfg.nodeID, !cfg.noLocalNode); err != nil {
				return err
			}
			if cfg.gcEvery > 0 {
				var sw *retention.Sweeper
				lc.Append(fx.Hook{
					OnStart: func(ctx context.Context) error {
						store, err := objectstore.Open(ctx, js, "")
						if err != nil {
							return err
						}
						if sw, err = retention.NewSweeper(store, retention.ProjectedSessions(js), cfg.retention, cfg.gcEvery, logger); err != nil {
							return err
						}
						sw.Start()
						return nil
					},
					OnStop: func(context.Context) error {
						if sw != nil {
							sw.Close()
						}
						return nil
					},
				})
			}
			// Auditors' consumers: the engine makes them (package auditfeed).
			feed := auditfeed.New(c.engine, js, auditfeed.Config{}, logger)
			lc.Append(fx.Hook{OnStart: feed.Start, OnStop: func(context.Context) error { feed.Close(); return nil }})
			var xfer *transfer.Service
			lc.Append(fx.Hook{
				OnStart: func(ctx context.Context) error {
					store, err := objectstore.Open(ctx, js, "")
					if err != nil {
						return err
					}
					xfer = transfer.New(c.engine, store.Metered(cfg.metrics), transfer.Config{}, logger)
					return xfer.Start(ctx)
				},
				OnStop: func(context.Context) error {
					if xfer != nil {
						xfer.Close()
					}
					return nil
				},
			})
			// The free space of the embedded server's state dir, and of the
			// in-process node's sandboxes' disk, is watched (statfs): logged
			// below the thresholds, and the node refuses creates while one
			// is critical.
			var diskDirs []string
			if cfg.natsURL == "" {
				diskDirs = append(diskDirs, cfg.stateDir) // the embedded server's store
			}
			var rts []runtime.Runtime
			if !cfg.noLocalNode {
				var closeRuntimes func() error
				rts, closeRuntimes, err = runtimes.Open(ctx, runtimes.Options{Mode: cfg.runtime, Node: cfg.nodeID, LocalDir: cfg.sandboxDir, Loopback: cfg.loopback(), Docker: *cfg.docker, StateDir: cfg.stateDir, Images: cfg.imageOptions()}, logger)
				if err != nil {
					return err
				}
				lc.Append(fx.StopHook(closeRuntimes))
				dirs, dockerRoot := diskflags.DataDirs(ctx, rts, cfg.sandboxDir, logger)
				diskDirs = append(diskDirs, dirs...)
				if cfg.natsURL == "" {
					warnSharedFilesystem(cfg.stateDir, dockerRoot, logger)
				}
			}
			var disks nodes.Disks
			if len(diskDirs) > 0 {
				w, err := cfg.disk.Watcher(diskDirs, logger)
				if err != nil {
					return err
				}
				lc.Append(fx.Hook{OnStart: w.Start, OnStop: w.Close})
				disks = w
				if err := metricsflags.WatchDisks(cfg.metrics, w); err != nil {
					return err
				}
			}
			if cfg.noLocalNode {
				return nil
			}
			njs, err := jetstream.New(c.node)
			if err != nil {
				return err
			}
			agent, err := nodes.New(c.node, events.NewLog(njs, "", ""), nodes.Config{
				ID: cfg.nodeID, Capture: nodes.Capture{Limit: cfg.capture}, CompressSnapshots: cfg.zstdSnaps,
				Snapshots: cfg.snapshotFormat, ChunkCacheDir: filepath.Join(cfg.stateDir, "chunks"), ChunkCacheBytes: cfg.chunkCache(),
				TreeCacheDir:     filepath.Join(cfg.stateDir, "trees"),
				TenantConcurrent: cfg.tenantConcurrent, TenantSessions: cfg.tenantSessions, Policy: pol,
				Signer: c.nodeSigner, Metrics: cfg.metrics, TracerProvider: tp, Disks: disks,
				Egress: nodes.EgressConfig{ClusterPorts: append(c.serverPorts, cfg.clusterPorts...)},
			}, logger, rts...)
			if err != nil {
				return err
			}
			lc.Append(fx.Hook{OnStart: agent.Start, OnStop: agent.Close})
			return nil
		}),
		projectorModule(cfg, asked),
		// The read-only web console (--console-addr; package console).
		fx.Invoke(func(lc fx.Lifecycle, js jetstream.JetStream) error {
			return consoleFlags.Serve(lc, js, auth.DirIn(cfg.stateDir), logger)
		}),
		fx.StartTimeout(startTimeout),
		fx.StopTimeout(40*time.Second),
	)
	if err := app.Err(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
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
	// engineName and engineSigner are the engine's identity and key as the
	// writer of the events it records (node losses); without credentials
	// the name is "engine" and the scheduler makes a key.
	engineName   string
	engineSigner events.Signer
	// maxStore is the embedded server's JetStream store (0: not embedded).
	maxStore int64
	// serverPorts are the embedded server's listeners' ports: client,
	// route, monitoring, profiler (none: not embedded).
	serverPorts []int
}

// engineIdentity takes the engine's name and signing key from its
// credentials (none: "engine", and a key the scheduler makes).
func (c *conns) engineIdentity(creds *auth.Creds) error {
	c.engineName = "engine"
	if creds == nil {
		return nil
	}
	kp, err := creds.KeyPair()
	if err != nil {
		return err
	}
	c.engineName, c.engineSigner = creds.Name, kp
	return nil
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
	bc.HealFree = healFree(cfg.stateDir, cfg.diskLevels)
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
	var engineCreds *auth.Creds
	if c.engine, engineCreds, err = inProcess("engine"); err != nil {
		closeAll()
		return conns{}, err
	}
	if err := c.engineIdentity(engineCreds); err != nil {
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
	c.maxStore = b.MaxStore()
	c.serverPorts = b.ListenerPorts()
	logger.Info("embedded NATS listening", "url", b.ClientURL(), "jetstream", bc.StoreDir, "sync_always", bc.SyncInterval == 0, "auth", store != nil)
	if store != nil {
		logger.Info("credentials", "admin", store.CredsPath("admin"), "client_default", store.CredsPath("client-default"), "auth_dir", store.Dir())
	}
	stopWatch := func() {}
	if store != nil {
		stopWatch = b.WatchConfig(store.ConfigPath(), logger)
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
	var engineCreds *auth.Creds
	if c.engine, engineCreds, err = dialAs("paddock-engine", cfg.creds); err != nil {
		return conns{}, err
	}
	if err := c.engineIdentity(engineCreds); err != nil {
		c.engine.Close()
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

// startTimeout bounds the engine's start: on a cluster that has just
// formed, or a loaded machine, JetStream may take a while to place the
// streams (readiness.RetryTransient tries again meanwhile).
const startTimeout = 60 * time.Second

// chunkCache is --chunk-cache-bytes as nodes.Config takes it: 0 (no
// cache) is negative there, where 0 is the default.
func (c *serveConfig) chunkCache() int64 {
	if c.chunkCacheBytes <= 0 {
		return -1
	}
	return c.chunkCacheBytes
}
