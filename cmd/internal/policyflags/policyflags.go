// Package policyflags registers the operator policy flags that agent-node
// and engine serve share (--allow-image, --allow-network, --allow-root,
// --max-cpus, --max-memory, --max-pids, --max-disk, --default-lifetime,
// --max-lifetime) and builds a nodes.Policy from
// them.
package policyflags

import (
	"fmt"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/bytesize"

	"github.com/paddock-dev/paddock/nodes"
)

// Flags holds the parsed policy flags.
type Flags struct {
	images  []string
	network bool
	root    bool
	cpus    float64
	memory  string
	disk    string
	pids    int64
	// defaultLife and maxLife are the session lifetimes.
	defaultLife, maxLife time.Duration
	// defaultIdle, maxIdle and retention are the idle timeouts and the
	// stopped retention.
	defaultIdle, maxIdle, retention time.Duration
}

// DefaultIdleTimeout is --idle-timeout's default: a session nobody has used
// for half an hour is stopped (its workspace persisted; resume brings it
// back), so that forgotten sandboxes do not hold a node's capacity.
const DefaultIdleTimeout = 30 * time.Minute

// DefaultMaxDisk is --max-disk's default: a create may ask up to 20 GiB of
// disk (the default it gets is --default-disk's 2 GiB).
const DefaultMaxDisk = "20g"

// Register adds the policy flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.Func("allow-image", "an image pattern creates may name (repeatable; default: the base image only)", func(s string) error {
		f.images = append(f.images, s)
		return nil
	})
	fs.BoolVar(&f.network, "allow-network", false, "let creates ask for an open network (egress open); egress allow, with an allow list the node enforces, needs no flag")
	fs.BoolVar(&f.root, "allow-root", false, "let creates and execs run as root")
	fs.Float64Var(&f.cpus, "max-cpus", 0, "most cpus a create may ask (0: no bound)")
	fs.StringVar(&f.memory, "max-memory", "", "most memory a create may ask, e.g. 4g (default: no bound)")
	fs.Int64Var(&f.pids, "max-pids", 0, "most processes a create may ask (0: no bound)")
	fs.StringVar(&f.disk, "max-disk", DefaultMaxDisk, "most disk a create may ask, e.g. 20g (0: no bound; the default a create gets is --default-disk)")
	fs.DurationVar(&f.defaultLife, "default-lifetime", 0, "lifetime of a session whose create asks for none (0: --max-lifetime)")
	fs.DurationVar(&f.maxLife, "max-lifetime", 0, "longest lifetime a create may ask; past its lifetime a session is shut down (0: no bound)")
	fs.DurationVar(&f.defaultIdle, "idle-timeout", DefaultIdleTimeout, "stop (persisting first) a session with no operation and no running process for this long, unless its create asks otherwise (0: never)")
	fs.DurationVar(&f.maxIdle, "max-idle-timeout", 0, "longest idle timeout a create may ask (0: no bound)")
	fs.DurationVar(&f.retention, "stopped-retention", 0, "shut down a session stopped this long; its snapshots stay for a resume (0: never)")
	return f
}

// Policy returns the policy the flags say, or an error naming a bad flag.
func (f *Flags) Policy() (nodes.Policy, error) {
	p := nodes.Policy{Images: f.images, AllowNetwork: f.network, AllowRoot: f.root, MaxCPUs: f.cpus, MaxPids: f.pids,
		DefaultLifetime: f.defaultLife, MaxLifetime: f.maxLife,
		DefaultIdleTimeout: f.defaultIdle, MaxIdleTimeout: f.maxIdle, StoppedRetention: f.retention}
	if f.memory != "" {
		n, err := bytesize.Parse(f.memory)
		if err != nil {
			return p, fmt.Errorf("--max-memory: %w", err)
		}
		p.MaxMemoryBytes = n
	}
	if f.disk != "" {
		n, err := bytesize.Parse(f.disk)
		if err != nil {
			return p, fmt.Errorf("--max-disk: %w", err)
		}
		p.MaxDiskBytes = n
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}
