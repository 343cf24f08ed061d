// Command agent-node is Paddock's node agent: one per host. It connects to
// the deployment's NATS, registers, and executes the commands of the
// sessions placed on it against the host's runtime.
//
//	agent-node --nats-url nats://engine-host:4222 --creds node.creds [--id NAME] [--runtime auto|docker|gvisor|runsc|local]
//
// --creds are the node's own credentials (engine auth add node NAME): they
// authenticate it and their key signs every event it appends.
//
// --runtime auto (the default) uses Docker when its daemon answers, else the
// local runtime. It never picks gvisor (Docker with gVisor's runsc), which
// must be named, and which fails the start when Docker does not run a
// probe container under runsc (engine runtime register-gvisor registers
// it). On start the agent reattaches the Docker sandboxes of its sessions
// (the id must be the same as before the restart) and reaps labelled
// containers no session owns after --reap-grace.
//
// SIGTERM or SIGINT drains it: it stops taking commands and waits up to
// --drain-timeout for in-flight ones before it exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	flag "github.com/spf13/pflag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/paddock-dev/paddock/cmd/internal/diskflags"
	"github.com/paddock-dev/paddock/cmd/internal/metricsflags"
	"github.com/paddock-dev/paddock/cmd/internal/policyflags"
	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/cmd/internal/tracingflags"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

func main() {
	// The process's lifetime context: cancelled on SIGINT/SIGTERM.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runCLI(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type config struct {
	natsURL          string
	id               string
	runtime          string
	dir              string
	capacity         int
	capture          int
	drainTimeout     time.Duration
	reapGrace        time.Duration
	labels           string
	exposeHost       string
	zstdSnaps        bool
	snapshotFormat   string
	chunkCacheDir    string
	chunkCacheBytes  int64
	treeCacheDir     string
	treeCacheBytes   int64
	changeAttr       bool
	tenantConcurrent int
	tenantSessions   int
	creds            string
	tlsCA            string
	clusterPorts     string
}

// nodeFlags are agent-node's flags and what they fill in.
type nodeFlags struct {
	cfg        config
	metrics    *metricsflags.Flags
	disk       *diskflags.Flags
	docker     *runtimes.DockerFlags
	policy     *policyflags.Flags
	traces     *tracingflags.Flags
	configFile *string
	jsonLog    *bool
}

// registerFlags adds agent-node's flags to fs.
func registerFlags(fs *flag.FlagSet) *nodeFlags {
	f := &nodeFlags{}
	cfg := &f.cfg
	host, _ := os.Hostname()
	fs.StringVar(&cfg.natsURL, "nats-url", envOr("PADDOCK_URL", "nats://127.0.0.1:4222"), "NATS URL of the deployment (env PADDOCK_URL)")
	fs.StringVar(&cfg.creds, "creds", os.Getenv("PADDOCK_CREDS"), "the node's credentials file (engine auth add node ID; env PADDOCK_CREDS); its key signs the node's events")
	fs.StringVar(&cfg.tlsCA, "tls-ca", os.Getenv("PADDOCK_TLS_CA"), "CA that signed the server's TLS certificate (env PADDOCK_TLS_CA)")
	fs.StringVar(&cfg.id, "id", strings.NewReplacer(".", "-", " ", "-").Replace(host), "node id (a subject token)")
	fs.StringVar(&cfg.runtime, "runtime", "auto", "runtime: "+runtimes.Modes+" (auto: Docker when its daemon answers)")
	fs.StringVar(&cfg.dir, "dir", filepath.Join(os.TempDir(), "paddock-node"), "directory for local sandboxes")
	fs.IntVar(&cfg.capacity, "capacity", 1000, "most sessions this node holds")
	fs.IntVar(&cfg.tenantConcurrent, "tenant-concurrency", 0, "most commands of one tenant in flight on this node (default: a quarter of 256)")
	fs.IntVar(&cfg.tenantSessions, "tenant-sessions", 0, "most sessions of one tenant on this node (default: --capacity)")
	fs.IntVar(&cfg.capture, "capture-output", 0, "capture up to N bytes of exec stdout/stderr in events (0: byte counts only)")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 30*time.Second, "how long SIGTERM waits for in-flight commands")
	fs.StringVar(&cfg.labels, "labels", "", "node labels K=V,K=V for placement")
	fs.StringVar(&cfg.exposeHost, "expose-host", "127.0.0.1", "IP the forwards of sessions' exposed ports listen on (0.0.0.0: the node's network)")
	fs.BoolVar(&cfg.zstdSnaps, "zstd-snapshots", false, "compress workspace snapshots with zstd (smaller for compressible workspaces)")
	fs.StringVar(&cfg.snapshotFormat, "snapshot-format", "", "format persist writes: manifest (content-addressed: only changed chunks are uploaded; the default) or tar (the whole workspace each time; the default with --zstd-snapshots, which applies to it); both are restored")
	fs.StringVar(&cfg.chunkCacheDir, "chunk-cache-dir", filepath.Join(os.TempDir(), "paddock-node-chunks"), "the node's cache of snapshot chunks, which restores read before the object store")
	fs.Int64Var(&cfg.chunkCacheBytes, "chunk-cache-bytes", nodes.DefaultChunkCacheBytes, "bound of the chunk cache (0: no cache)")
	fs.StringVar(&cfg.treeCacheDir, "tree-cache-dir", "", "the node's kept workspace trees, which restores of the same snapshot mount as overlays (needs root; default: --chunk-cache-dir with -trees appended)")
	fs.Int64Var(&cfg.treeCacheBytes, "tree-cache-bytes", nodes.DefaultTreeCacheBytes, "bound of the kept trees' bytes (0: none kept)")
	fs.BoolVar(&cfg.changeAttr, "change-attribution", true, "record what every exec, process, write, rm and mkdir changed in the workspace in its finish event")
	fs.StringVar(&cfg.clusterPorts, "egress-cluster-ports", "", "more ports of the NATS cluster (route, leafnode, monitoring; comma separated) that no egress allow list reaches at a private address; its client ports, and NATS's defaults, are refused already")
	fs.DurationVar(&cfg.reapGrace, "reap-grace", 5*time.Minute, "remove labelled sandboxes no session owns once they are this old")
	f.metrics = metricsflags.Register(fs)
	f.disk = diskflags.Register(fs)
	f.docker = runtimes.RegisterDockerFlags(fs)
	f.policy = policyflags.Register(fs)
	f.traces = tracingflags.Register(fs)
	f.configFile = fs.String("config", os.Getenv("PADDOCK_CONFIG"), "YAML configuration file: keys are the flag names (env PADDOCK_CONFIG); flags > env PADDOCK_<FLAG> (PADDOCK_URL for --nats-url) > file > defaults")
	f.jsonLog = fs.Bool("json", false, "log JSON lines on stderr (log/slog's JSON handler)")
	return f
}

// runNode runs the node agent with its flags parsed, until ctx ends.
func runNode(ctx context.Context, f *nodeFlags, stderr io.Writer) error {
	cfg := &f.cfg
	metricsFlags, diskFlags, dockerFlags, policy, traces := f.metrics, f.disk, f.docker, f.policy, f.traces
	met, err := metricsFlags.Open()
	if err != nil {
		return err
	}
	if err := traces.Validate(); err != nil {
		return err
	}
	pol, err := policy.Policy()
	if err != nil {
		return err
	}
	if pol.MaxDiskBytes > 0 && dockerFlags.DefaultDiskBytes > pol.MaxDiskBytes {
		return fmt.Errorf("--default-disk %d is over --max-disk %d", dockerFlags.DefaultDiskBytes, pol.MaxDiskBytes)
	}
	labels := map[string]string{}
	if cfg.labels != "" {
		for _, kv := range strings.Split(cfg.labels, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("--labels: want K=V, got %q", kv)
			}
			labels[k] = v
		}
	}
	if err := runtimes.Check(cfg.runtime); err != nil {
		return err
	}
	if cfg.reapGrace <= 0 {
		return fmt.Errorf("--reap-grace must be positive")
	}
	clusterPorts, err := egress.ParsePorts(cfg.clusterPorts)
	if err != nil {
		return fmt.Errorf("--egress-cluster-ports: %w", err)
	}
	if _, err := diskFlags.Thresholds(); err != nil {
		return err
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if *f.jsonLog {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	logger := slog.New(handler)

	app := fx.New(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.Provide(func(lc fx.Lifecycle) (*nats.Conn, events.Signer, error) {
			creds := cfg.creds
			if creds == "" {
				creds = "none" // never an admin's default credentials
			}
			nc, who, err := client.Connect(client.ConnectOptions{URL: cfg.natsURL, Creds: creds, TLSCA: cfg.tlsCA, Name: "paddock-node-" + cfg.id, Extra: []nats.Option{nats.MaxReconnects(-1)}})
			if err != nil {
				return nil, nil, err
			}
			lc.Append(fx.StopHook(nc.Close))
			if who == nil {
				return nc, nil, nil // the node makes a signing key for this run
			}
			if who.Role != auth.RoleNode || who.Name != cfg.id {
				nc.Close()
				return nil, nil, fmt.Errorf("--creds are those of %s %s, not of node %s", who.Role, who.Name, cfg.id)
			}
			kp, err := who.KeyPair()
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			return nc, kp, nil
		}),
		fx.Provide(func(lc fx.Lifecycle) ([]runtime.Runtime, error) {
			rts, closeRuntimes, err := runtimes.Open(ctx, runtimes.Options{Mode: cfg.runtime, Node: cfg.id, LocalDir: cfg.dir, Loopback: runtimes.URLIsLoopback(cfg.natsURL), Docker: *dockerFlags}, logger)
			if err != nil {
				return nil, err
			}
			lc.Append(fx.StopHook(closeRuntimes))
			return rts, nil
		}),
		fx.Invoke(func(lc fx.Lifecycle, nc *nats.Conn, signer events.Signer, rts []runtime.Runtime) error {
			metricsFlags.Serve(lc, met, logger)
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			tp, err := traces.Provider(ctx, lc, "paddock-node")
			if err != nil {
				return err
			}
			// The filesystems the sandboxes fill: the node refuses creates
			// while one is critically full.
			dirs, _ := diskflags.DataDirs(ctx, rts, cfg.dir, logger)
			var disks nodes.Disks
			if len(dirs) > 0 {
				w, err := diskFlags.Watcher(dirs, logger)
				if err != nil {
					return err
				}
				lc.Append(fx.Hook{OnStart: w.Start, OnStop: w.Close})
				disks = w
				if err := metricsflags.WatchDisks(met, w); err != nil {
					return err
				}
			}
			metricsflags.ReadyJetStream(met, js)
			agent, err := nodes.New(nc, events.NewLog(js, "", ""), nodes.Config{
				ID: cfg.id, Capacity: cfg.capacity, Labels: labels, Capture: nodes.Capture{Limit: cfg.capture},
				TenantConcurrent: cfg.tenantConcurrent, TenantSessions: cfg.tenantSessions, Policy: pol,
				ReapGrace: cfg.reapGrace, ReapInterval: min(cfg.reapGrace/2, time.Minute),
				CompressSnapshots: cfg.zstdSnaps, Snapshots: cfg.snapshotFormat, ChunkCacheDir: cfg.chunkCacheDir, ChunkCacheBytes: chunkCacheBytes(cfg.chunkCacheBytes),
				TreeCacheDir: treeCacheDir(cfg.treeCacheDir, cfg.chunkCacheDir), TreeCacheBytes: chunkCacheBytes(cfg.treeCacheBytes),
				ChangeAttribution: &cfg.changeAttr, Signer: signer, ExposeHost: cfg.exposeHost, Metrics: met, TracerProvider: tp,
				Egress: nodes.EgressConfig{ClusterPorts: clusterPorts}, Disks: disks,
			}, logger, rts...)
			if err != nil {
				return err
			}
			lc.Append(fx.Hook{OnStart: agent.Start, OnStop: agent.Close})
			return nil
		}),
		// Started with, or before, the engine, a node waits this long for
		// the events stream (nodes.Agent registers with retries).
		fx.StartTimeout(2*time.Minute),
		fx.StopTimeout(cfg.drainTimeout+5*time.Second),
	)
	if err := app.Err(); err != nil {
		return err
	}
	// The start bound is fx's StartTimeout above (a deployment whose
	// servers are still electing their JetStream leaders takes a while);
	// a shorter context here would cut it short.
	startCtx, cancel := context.WithTimeout(ctx, app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	<-ctx.Done()
	// Draining gets its own bound: ctx is already done.
	stopCtx, cancel2 := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel2()
	return app.Stop(stopCtx)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// treeCacheDir is --tree-cache-dir, by default the chunk cache's
// directory with -trees appended (one per node when each has its own
// chunk cache).
func treeCacheDir(dir, chunks string) string {
	if dir != "" || chunks == "" {
		return dir
	}
	return filepath.Clean(chunks) + "-trees"
}

// chunkCacheBytes is --chunk-cache-bytes as nodes.Config takes it: 0
// (no cache) is negative there, where 0 is the default.
func chunkCacheBytes(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
