// Package policyflags registers the operator policy flags that agent-node
// and engine serve share (--allow-image, --allow-network, --allow-root,
// --max-cpus, --max-memory, --max-pids) and builds a nodes.Policy from
// them.
package policyflags

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/nodes"
)

// Flags holds the parsed policy flags.
type Flags struct {
	images  []string
	network bool
	root    bool
	cpus    float64
	memory  string
	pids    int64
}

// Register adds the policy flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.Func("allow-image", "an image pattern creates may name (repeatable; default: the base image only)", func(s string) error {
		f.images = append(f.images, s)
		return nil
	})
	fs.BoolVar(&f.network, "allow-network", false, "let creates ask for a network")
	fs.BoolVar(&f.root, "allow-root", false, "let creates and execs run as root")
	fs.Float64Var(&f.cpus, "max-cpus", 0, "most cpus a create may ask (0: no bound)")
	fs.StringVar(&f.memory, "max-memory", "", "most memory a create may ask, e.g. 4g (default: no bound)")
	fs.Int64Var(&f.pids, "max-pids", 0, "most processes a create may ask (0: no bound)")
	return f
}

// Policy returns the policy the flags say, or an error naming a bad flag.
func (f *Flags) Policy() (nodes.Policy, error) {
	p := nodes.Policy{Images: f.images, AllowNetwork: f.network, AllowRoot: f.root, MaxCPUs: f.cpus, MaxPids: f.pids}
	if f.memory != "" {
		n, err := parseBytes(f.memory)
		if err != nil {
			return p, fmt.Errorf("--max-memory: %w", err)
		}
		p.MaxMemoryBytes = n
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// parseBytes reads 512, 512k, 64m, 2g or 1t (powers of 1024).
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 512m or 4g", s)
	}
	return v * mult, nil
}
