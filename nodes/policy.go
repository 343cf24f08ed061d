package nodes

import (
	"path"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/egress"
	"github.com/paddock-dev/paddock/errcode"
)

// Policy is the operator's word on what a create or an exec may ask of a
// node: a request asks, the policy decides (as Nomad's docker driver
// refuses privileged mode unless its config allows it). A refusal is
// policy_denied, and it is recorded: the op's start event says what was
// asked, its finish why it was refused. The zero Policy is the default:
// the base image only, no network, no root, the runtime's own limits.
type Policy struct {
	// Images are the images a Docker create may name, as path.Match
	// patterns ("registry.example.com/team/*"); empty allows only
	// commands.DefaultImage.
	Images []string
	// AllowNetwork lets a create ask for an open network (egress mode
	// open, or network true). Mode allow needs no permission: its allow
	// list is enforced by the node.
	AllowNetwork bool
	// AllowRoot lets a create or an exec run as root: the user "root" or
	// uid 0 ("0", "0:0", "root:..."). An image that gives another name uid
	// 0 is the image policy's business: allow only images you know.
	AllowRoot bool
	// MaxCPUs, MaxMemoryBytes and MaxPids bound what a create may ask
	// (0: no bound beyond the contract's).
	MaxCPUs        float64
	MaxMemoryBytes int64
	MaxPids        int64
	// MaxDiskBytes bounds the disk a create may ask (0: no bound beyond
	// the contract's). The default a create gets when it asks none is the
	// runtime's (docker.Config.DefaultDiskBytes).
	MaxDiskBytes int64
	// DefaultLifetime is a session's lifetime when its create asks for
	// none (0: MaxLifetime); MaxLifetime bounds what a create may ask
	// (0: no bound, and no lifetime unless asked).
	DefaultLifetime, MaxLifetime time.Duration
	// DefaultIdleTimeout stops a session idle this long when its create
	// asks for no idle timeout (0: none); MaxIdleTimeout bounds what a
	// create may ask (0: no bound).
	DefaultIdleTimeout, MaxIdleTimeout time.Duration
	// StoppedRetention shuts down a session stopped this long, keeping its
	// snapshots for a resume (0: stopped sessions keep their sandbox).
	StoppedRetention time.Duration
}

// idleTimeout is the idle timeout a create asking for askS seconds gets
// (0: none).
func (p Policy) idleTimeout(askS int64) time.Duration {
	if askS > 0 {
		return time.Duration(askS) * time.Second
	}
	return p.DefaultIdleTimeout
}

// lifetime is the lifetime a create asking for askS seconds gets (0: none).
func (p Policy) lifetime(askS int64) time.Duration {
	switch {
	case askS > 0:
		return time.Duration(askS) * time.Second
	case p.DefaultLifetime > 0:
		return p.DefaultLifetime
	}
	return p.MaxLifetime
}

// Validate checks the policy's patterns and bounds.
func (p Policy) Validate() error {
	for _, pat := range p.Images {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			return errcode.New(errcode.InvalidRequest, "image pattern %q is not a valid pattern", pat)
		}
	}
	if p.MaxCPUs < 0 || p.MaxMemoryBytes < 0 || p.MaxPids < 0 || p.MaxDiskBytes < 0 || p.DefaultLifetime < 0 || p.MaxLifetime < 0 ||
		p.DefaultIdleTimeout < 0 || p.MaxIdleTimeout < 0 || p.StoppedRetention < 0 {
		return errcode.New(errcode.InvalidRequest, "policy bounds must not be negative")
	}
	if p.MaxLifetime > 0 && p.DefaultLifetime > p.MaxLifetime {
		return errcode.New(errcode.InvalidRequest, "the default lifetime %s is over the maximum %s", p.DefaultLifetime, p.MaxLifetime)
	}
	if p.MaxIdleTimeout > 0 && p.DefaultIdleTimeout > p.MaxIdleTimeout {
		return errcode.New(errcode.InvalidRequest, "the default idle timeout %s is over the maximum %s", p.DefaultIdleTimeout, p.MaxIdleTimeout)
	}
	return nil
}

// checkCreate returns policy_denied when spec (on runtime rt) asks for
// more than p allows.
func (p Policy) checkCreate(spec commands.CreateArgs, rt string) error {
	deny := func(format string, args ...any) error {
		return errcode.New(errcode.PolicyDenied, format, args...)
	}
	if ask := time.Duration(spec.LifetimeS) * time.Second; p.MaxLifetime > 0 && ask > p.MaxLifetime {
		return deny("a lifetime of %s is over this node's maximum of %s", ask, p.MaxLifetime)
	}
	if ask := time.Duration(spec.IdleTimeoutS) * time.Second; p.MaxIdleTimeout > 0 && ask > p.MaxIdleTimeout {
		return deny("an idle timeout of %s is over this node's maximum of %s", ask, p.MaxIdleTimeout)
	}
	if isContainerRuntime(rt) && !p.imageAllowed(spec.Image) {
		return deny("image %s is not allowed on this node", spec.Image)
	}
	if eg := commands.EffectiveEgress(spec.Network, spec.Egress); eg.Mode == egress.ModeOpen && !p.AllowNetwork {
		return deny("this node allows no open network (egress mode allow, with an allow list, may be)")
	}
	if isRoot(spec.User) && !p.AllowRoot {
		return deny("this node does not run sessions as root (user %q)", spec.User)
	}
	if p.MaxCPUs > 0 && spec.CPUs > p.MaxCPUs {
		return deny("cpus %v is over this node's limit of %v", spec.CPUs, p.MaxCPUs)
	}
	if p.MaxMemoryBytes > 0 && spec.MemoryBytes > p.MaxMemoryBytes {
		return deny("memory_bytes %d is over this node's limit of %d", spec.MemoryBytes, p.MaxMemoryBytes)
	}
	if p.MaxPids > 0 && spec.PidsLimit > p.MaxPids {
		return deny("pids_limit %d is over this node's limit of %d", spec.PidsLimit, p.MaxPids)
	}
	if p.MaxDiskBytes > 0 && spec.DiskBytes > p.MaxDiskBytes {
		return deny("disk_bytes %d is over this node's limit of %d", spec.DiskBytes, p.MaxDiskBytes)
	}
	return nil
}

// checkExec returns policy_denied for an exec as root when p does not
// allow root.
func (p Policy) checkExec(args *commands.ExecArgs) error {
	if isRoot(args.User) && !p.AllowRoot {
		return errcode.New(errcode.PolicyDenied, "this node does not run commands as root (user %q)", args.User)
	}
	return nil
}

func (p Policy) imageAllowed(image string) bool {
	if len(p.Images) == 0 {
		return image == commands.DefaultImage
	}
	for _, pat := range p.Images {
		if ok, _ := path.Match(pat, image); ok {
			return true
		}
	}
	return false
}

// isRoot reports whether a user spec ("name", "uid", "user:group") names
// root: the name root or uid 0 in any spelling ("00").
func isRoot(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	if u == "root" {
		return true
	}
	if u == "" {
		return false
	}
	return strings.Trim(u, "0") == ""
}
