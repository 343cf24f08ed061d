package nodes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/metrics"
)

// Capture is the output capture policy for exec events.
type Capture struct {
	// Limit is how many bytes of stdout and of stderr each finish event
	// carries. 0 (the default) captures nothing: events record only byte
	// counts. Secret values are redacted before capture either way.
	Limit int
}

// Config configures an Agent.
type Config struct {
	// ID names the node; it must be a valid subject token.
	ID string
	// Signer signs every event the node appends: its nkey from its
	// credentials when auth is on. Nil: New makes a key for this run and
	// registers its public key in the node's registered event.
	Signer events.Signer
	// Prefix of every subject (default sbx).
	Prefix string
	// Capacity is the most sessions the node holds (default 1000).
	Capacity int
	// Labels are advertised in heartbeats for placement.
	Labels map[string]string
	// AppendPatience is how long an event append whose outcome is unknown
	// (the server did not answer: a leader lost, a server killed) is sent
	// again before the operation is answered as failed (default 30s).
	AppendPatience time.Duration
	// HeartbeatInterval (default 2s).
	HeartbeatInterval time.Duration
	// Capture is the exec output capture policy for events.
	Capture Capture
	// DefaultExecTimeout applies when an exec gives none (default 10m).
	DefaultExecTimeout time.Duration
	// ChangeAttribution records what every exec, process, write, rm and
	// mkdir changed in the workspace in its finish event (nil: on; see
	// docs/architecture.md, "What every op changed").
	ChangeAttribution *bool
	// ExposeHost is the address the forwards of sessions' exposed ports
	// listen on (op port; default 127.0.0.1: reachable from this host
	// only). 0.0.0.0 exposes them to the node's network.
	ExposeHost string
	// MaxConcurrent bounds commands handled at once (default 256).
	MaxConcurrent int
	// TenantConcurrent bounds one tenant's commands in flight on the node
	// (default a quarter of MaxConcurrent), so that one tenant cannot take
	// every slot: a command past it is quota_exceeded at once.
	TenantConcurrent int
	// TenantSessions bounds the sessions one tenant holds on the node
	// (default: Capacity, no bound of its own).
	TenantSessions int
	// Policy is what creates and execs may ask of this node (the zero
	// Policy: the base image only, no network, no root).
	Policy Policy
	// ReapGrace is how old a sandbox of this node that no live session owns
	// must be before the reaper removes it (default 5m). The grace covers
	// sandboxes whose create is still being recorded.
	ReapGrace time.Duration
	// ReapInterval is how often the reaper looks (default 1m).
	ReapInterval time.Duration
	// ExpiryInterval is how often the node looks for sessions past their
	// lifetime (default 1s).
	ExpiryInterval time.Duration
	// MaxProcesses is a session's process limit when its create names
	// none (default 16; commands.MaxProcesses at most).
	MaxProcesses int
	// ProcBufferBytes bounds the output a process keeps that nobody has
	// read (default 1 MiB); past it the oldest bytes are dropped, and the
	// next reader is told how many.
	ProcBufferBytes int
	// ProcIdleTimeout ends a process nobody has read, written or
	// signalled for this long (default 30m; the check runs with the
	// expiry loop).
	ProcIdleTimeout time.Duration
	// TracerProvider makes the spans of the node's operations and of
	// their runtime work (nil: tracing off; see package tracing).
	TracerProvider trace.TracerProvider
	// StreamBufferBytes bounds the output of a streaming exec that its
	// reader has not acknowledged (default 4 MiB): past it the command
	// waits for the reader.
	StreamBufferBytes int
	// StreamIdleTimeout drops a streaming exec's stream nobody has read
	// for this long (default 30s); the command goes on without it.
	StreamIdleTimeout time.Duration
	// WorkspaceBucket is the object store bucket of workspace snapshots
	// (default sbx_workspaces).
	WorkspaceBucket string
	// ArchiveLimits bound the archives hydrate extracts (zero fields: the
	// archive package's defaults).
	ArchiveLimits archive.Limits
	// CompressSnapshots writes zstd snapshots instead of plain tar ones
	// (smaller for compressible workspaces, slower for incompressible
	// ones; see docs/benchmarks.md).
	CompressSnapshots bool
	// Snapshots is the format persist writes (issue 25): SnapshotsManifest
	// (the default, "" too, unless CompressSnapshots: then tar) stores a content-addressed manifest and only
	// the chunks the tenant's store lacks; SnapshotsTar a tar of the whole
	// workspace, as before (CompressSnapshots applies to it). Both formats
	// are restored whatever this says.
	Snapshots string
	// DirtyTracking lets a manifest persist of a workspace the node scans
	// on the host read again only the paths an inotify watcher saw change
	// since the last scan, when that record is complete (nil: on; see
	// docs/architecture.md, "Dirty tracking", for what it cannot see and
	// the full scans that bound it).
	DirtyTracking *bool
	// FullScanEvery makes every FullScanEvery-th scan of a tracked
	// workspace a full one whatever the watcher says (default 16;
	// negative: never), bounding how long a change the watcher cannot
	// see (see DirtyTracking) stays out of the snapshots.
	FullScanEvery int
	// ChunkCacheDir is the node's local cache of snapshot chunks, which a
	// restore reads before the object store (empty: no cache). The agent
	// commands put it under their state directory.
	ChunkCacheDir string
	// CheckpointDir holds memory checkpoints (issue 27) while the node
	// stores or restores them; each gets a directory of its own, removed
	// after (empty: the system's temporary directory). A checkpoint is
	// as large as the sandbox's memory and workspace.
	CheckpointDir string
	// ChunkCacheBytes bounds the chunk cache (default 2 GiB; negative: no
	// cache); past it the least recently used chunks go.
	ChunkCacheBytes int64
	// TreeCacheDir keeps, per tenant and snapshot, the workspace trees
	// that restores wrote, so that a restore of the same snapshot on this
	// node again mounts one as an overlay's lower layer instead of writing
	// its files (package trees; empty: no kept trees). It needs the right
	// to mount overlays (root); without it restores write files.
	TreeCacheDir string
	// TreeCacheBytes bounds the kept trees' file bytes (default 4 GiB;
	// negative: none kept); past it the least recently used trees that no
	// overlay uses go.
	TreeCacheBytes int64
	// Metrics records the node's operations, event appends, sessions and
	// processes, and its object store bytes (nil: none).
	Metrics *metrics.Metrics
	// Egress configures the proxies of sessions with egress mode allow.
	Egress EgressConfig
	// Disks watches the free space of the filesystems the node writes to
	// (nil: none): the node refuses new sessions while one is critical,
	// and its heartbeats carry them (see disk.go).
	Disks Disks
}

// EgressConfig configures the egress proxies (docs/security.md, "Egress").
type EgressConfig struct {
	// Port is where a sandbox reaches its proxy, on its own loopback
	// (default 3128).
	Port int
	// RecordRate and RecordBurst are a session's budget of egress records
	// (defaults 20 per second, bursts of 100). An allowed connection waits
	// for the budget (every allowed connection is recorded); a refused one
	// over the budget is counted, not recorded, and the count goes into
	// the session's next egress record.
	RecordRate  float64
	RecordBurst int
	// Refuse are destinations no policy opens, on top of the node's own
	// addresses, link-local and metadata ones, and the networks of the
	// runtimes' sandboxes.
	Refuse []netip.Prefix
	// ClusterPorts are the NATS cluster's own ports (client, route,
	// monitoring, leafnode) that the node cannot learn from its
	// connection: an embedded server's listeners, a remote cluster's
	// route ports when they are not NATS's defaults. No policy reaches
	// them, nor NATS's default ports and the ports of the servers the
	// node's connection knows, at a private address, an address of the
	// node or a server's (docs/security.md, "Egress").
	ClusterPorts []int
	// Resolve looks names up for the proxies (default: the host's
	// resolver). It is only asked for names an allow entry holds.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
}

// The formats persist writes (Config.Snapshots).
const (
	SnapshotsManifest = "manifest"
	SnapshotsTar      = "tar"
)

// DefaultChunkCacheBytes is Config.ChunkCacheBytes's default: 2 GiB.
const DefaultChunkCacheBytes = 2 << 30

// DefaultTreeCacheBytes is Config.TreeCacheBytes's default: 4 GiB.
const DefaultTreeCacheBytes = 4 << 30

// Validate checks the config.
func (c Config) Validate() error {
	if c.Snapshots != "" && c.Snapshots != SnapshotsManifest && c.Snapshots != SnapshotsTar {
		return fmt.Errorf("nodes: snapshots %q is neither %s nor %s", c.Snapshots, SnapshotsManifest, SnapshotsTar)
	}
	if err := commands.CheckToken("node id", c.ID); err != nil {
		return err
	}
	if c.Capacity < 0 || c.MaxConcurrent < 0 || c.Capture.Limit < 0 || c.TenantConcurrent < 0 || c.TenantSessions < 0 {
		return errors.New("nodes: negative capacity, concurrency or capture limit")
	}
	if c.MaxProcesses < 0 || c.MaxProcesses > commands.MaxProcesses || c.ProcBufferBytes < 0 || c.StreamBufferBytes < 0 || c.StreamIdleTimeout < 0 {
		return fmt.Errorf("nodes: max processes outside 0..%d, or a negative process buffer", commands.MaxProcesses)
	}
	if c.AppendPatience < 0 || c.HeartbeatInterval < 0 || c.DefaultExecTimeout < 0 || c.ReapGrace < 0 || c.ReapInterval < 0 || c.ExpiryInterval < 0 || c.ProcIdleTimeout < 0 {
		return errors.New("nodes: negative interval")
	}
	if c.Egress.Port < 0 || c.Egress.Port > 65535 || c.Egress.RecordRate < 0 || c.Egress.RecordBurst < 0 {
		return errors.New("nodes: egress port outside 0..65535, or a negative record budget")
	}
	for _, p := range c.Egress.ClusterPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("nodes: egress cluster port %d outside 1..65535", p)
		}
	}
	if c.ExposeHost != "" && net.ParseIP(c.ExposeHost) == nil {
		return fmt.Errorf("nodes: expose host %q is not an IP address", c.ExposeHost)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("nodes: policy: %w", err)
	}
	if c.Capture.Limit > commands.MaxOutputBytes {
		return fmt.Errorf("nodes: capture limit above %d", commands.MaxOutputBytes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = commands.DefaultPrefix
	}
	if c.Capacity == 0 {
		c.Capacity = 1000
	}
	if c.AppendPatience == 0 {
		c.AppendPatience = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.DefaultExecTimeout == 0 {
		c.DefaultExecTimeout = 10 * time.Minute
	}
	if c.FullScanEvery == 0 {
		c.FullScanEvery = 16
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 256
	}
	if c.TenantConcurrent == 0 {
		c.TenantConcurrent = max(1, c.MaxConcurrent/4)
	}
	if c.TenantSessions == 0 {
		c.TenantSessions = c.Capacity
	}
	if c.ReapGrace == 0 {
		c.ReapGrace = 5 * time.Minute
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Minute
	}
	if c.ExpiryInterval == 0 {
		c.ExpiryInterval = time.Second
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = 16
	}
	if c.ProcBufferBytes == 0 {
		c.ProcBufferBytes = 1 << 20
	}
	if c.ExposeHost == "" {
		c.ExposeHost = "127.0.0.1"
	}
	if c.ProcIdleTimeout == 0 {
		c.ProcIdleTimeout = 30 * time.Minute
	}
	if c.StreamBufferBytes == 0 {
		c.StreamBufferBytes = 4 << 20
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = 30 * time.Second
	}
	if c.Egress.Port == 0 {
		c.Egress.Port = 3128
	}
	if c.Snapshots == "" {
		// Compression is the tar format's: a node asked for it without a
		// format keeps writing compressed tars, as before.
		c.Snapshots = SnapshotsManifest
		if c.CompressSnapshots {
			c.Snapshots = SnapshotsTar
		}
	}
	if c.TreeCacheBytes == 0 {
		c.TreeCacheBytes = DefaultTreeCacheBytes
	}
	if c.ChunkCacheBytes == 0 {
		c.ChunkCacheBytes = DefaultChunkCacheBytes
	}
	if c.Egress.RecordRate == 0 {
		c.Egress.RecordRate = 20
	}
	if c.Egress.RecordBurst == 0 {
		c.Egress.RecordBurst = 100
	}
	return c
}

// Info is what a node advertises in its heartbeats and its registered
// event (the events package owns the type, as it owns all event data).
type Info = events.NodeInfo
