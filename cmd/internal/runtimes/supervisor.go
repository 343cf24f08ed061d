package runtimes

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

// DockerFlags are the Docker runtime's flags that agent-node and engine
// serve share: the in-sandbox supervisor and the warm pools.
type DockerFlags struct {
	// Supervisor is "auto" (find or build it; without one, the Docker
	// API), "off", or the path of a static paddock-supervisor binary.
	Supervisor string
	// SupervisorDir holds the sandboxes' socket directories (default
	// under the user's cache directory, per node).
	SupervisorDir string
	// Pools are the warm pools (--pool IMAGE=N, repeatable).
	Pools []docker.PoolSpec
	// PoolMaxIdle renews pool containers older than it.
	PoolMaxIdle time.Duration
	// DefaultDiskBytes bounds what a sandbox whose create asks no disk may
	// write (--default-disk, 2 GiB).
	DefaultDiskBytes int64
	// DiskDir holds the sandboxes' loopfs disk images (--disk-dir;
	// default under the user's cache directory, per node).
	DiskDir string
	// GVisorRuntime is the name Docker knows runsc under, for --runtime
	// gvisor (--gvisor-runtime, default runsc).
	GVisorRuntime string

	// bin and dir are what supervisorConfig resolved, once resolved.
	bin, dir string
	resolved bool
}

// RegisterDockerFlags adds --supervisor, --supervisor-dir, --pool and
// --pool-max-idle to fs.
func RegisterDockerFlags(fs *flag.FlagSet) *DockerFlags {
	f := &DockerFlags{}
	fs.StringVar(&f.Supervisor, "supervisor", "auto", `the in-sandbox supervisor for Docker sandboxes: "auto" (paddock-supervisor beside this binary or on PATH, else built from the source tree this runs in), "off" (every operation through the Docker API), or a path`)
	fs.StringVar(&f.SupervisorDir, "supervisor-dir", "", "directory of the sandboxes' supervisor sockets; keep it across restarts (default: under the user's cache directory)")
	fs.Func("pool", "keep N started Docker sandboxes of IMAGE ready for creates that ask for the same limits: IMAGE=N[,cpus=C][,memory=M][,pids=P] (default limits unless named; repeatable; needs the supervisor)", func(s string) error {
		p, err := ParsePool(s)
		if err != nil {
			return err
		}
		f.Pools = append(f.Pools, p)
		return nil
	})
	fs.DurationVar(&f.PoolMaxIdle, "pool-max-idle", 10*time.Minute, "renew a pool sandbox nobody has claimed for this long")
	f.DefaultDiskBytes = docker.DefaultDiskBytes
	fs.Func("default-disk", "disk a Docker sandbox may write (workspace, /tmp, everything) when its create asks none, e.g. 2g (default 2g; --max-disk bounds what a create may ask)", func(s string) error {
		n, err := bytesize.Parse(s)
		if err != nil {
			return err
		}
		if n < commands.MinDisk {
			return fmt.Errorf("%d bytes is below the %d-byte minimum", n, commands.MinDisk)
		}
		f.DefaultDiskBytes = n
		return nil
	})
	fs.StringVar(&f.GVisorRuntime, "gvisor-runtime", docker.GVisorOCIRuntime, "the name Docker knows gVisor's runsc under, for --runtime gvisor (engine runtime register-gvisor registers it)")
	fs.StringVar(&f.DiskDir, "disk-dir", "", "directory of the Docker sandboxes' disk images where the host needs them (loopfs); keep it on another file system than --state-dir, and across restarts (default: under the user's cache directory)")
	return f
}

// diskDir returns the disk directory for node: --disk-dir, or a per-node
// directory under the user's cache directory.
func (f DockerFlags) diskDir(node string) (string, error) {
	dir := f.DiskDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "paddock", "disk", node)
	}
	return filepath.Abs(dir)
}

// supervisorConfig resolves the supervisor binary and its socket
// directory for node, saying on the log what it found.
func (f DockerFlags) supervisorConfig(ctx context.Context, node string, logger *slog.Logger) (bin, dir string, err error) {
	switch f.Supervisor {
	case "off":
		return "", "", nil
	case "", "auto":
		bin = findSupervisor(ctx, logger)
		if bin == "" {
			logger.Warn("no paddock-supervisor found or built: Docker sandboxes run every operation through the Docker API (tens of milliseconds each); build it with: CGO_ENABLED=0 go build -o <dir of this binary>/paddock-supervisor ./cmd/paddock-supervisor")
			return "", "", nil
		}
	default:
		bin, err = filepath.Abs(f.Supervisor)
		if err != nil {
			return "", "", err
		}
	}
	if err := checkStatic(bin); err != nil {
		if f.Supervisor == "auto" || f.Supervisor == "" {
			logger.Warn("the paddock-supervisor found cannot run in sandboxes; using the Docker API", "path", bin, "err", err)
			return "", "", nil
		}
		return "", "", fmt.Errorf("--supervisor: %w", err)
	}
	dir = f.SupervisorDir
	if dir == "" {
		dir = defaultSupervisorDir(node)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	// A socket's path is at most 107 bytes: dir, a 16-character name and
	// node.sock.
	if len(dir) > 80 {
		return "", "", fmt.Errorf("--supervisor-dir %q is too long for unix sockets (at most 80 bytes)", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	logger.Info("Docker sandboxes run the in-sandbox supervisor", "binary", bin, "sockets", dir)
	return bin, dir, nil
}

// defaultSupervisorDir is a per-node directory under the user's cache
// directory, or a short one under the temp directory when that would be
// too long for sockets.
func defaultSupervisorDir(node string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "paddock", "sup", node)
	if len(dir) <= 80 {
		return dir
	}
	sum := sha256.Sum256([]byte(node))
	return filepath.Join(os.TempDir(), fmt.Sprintf("paddock-sup-%d-%s", os.Getuid(), hex.EncodeToString(sum[:6])))
}

// findSupervisor looks for paddock-supervisor beside this binary, then on
// PATH, then builds it when this runs inside Paddock's source tree (as
// `go run ./cmd/engine serve` does) with a Go toolchain on PATH.
func findSupervisor(ctx context.Context, logger *slog.Logger) string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "paddock-supervisor")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("paddock-supervisor"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	src, ok := sourceTree()
	goTool, err := exec.LookPath("go")
	if !ok || err != nil {
		return ""
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	out := filepath.Join(base, "paddock", "bin", "paddock-supervisor")
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := images.BuildSupervisor(bctx, goTool, src, out); err != nil {
		logger.Warn("cannot build paddock-supervisor from the source tree", "err", err)
		return ""
	}
	logger.Info("built paddock-supervisor from the source tree", "path", out)
	return out
}

// sourceTree returns the directory of Paddock's go.mod at or above the
// working directory.
func sourceTree() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			return dir, strings.TrimSpace(first) == "module github.com/paddock-dev/paddock"
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// checkStatic refuses a binary that is not a statically linked ELF
// executable (a sandbox image need not have a libc, and rarely has ours).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New(path + " is dynamically linked; build it with CGO_ENABLED=0")
		}
	}
	return nil
}

// ParsePool parses a --pool value: IMAGE=N, then optional limits
// cpus=C, memory=M (a size such as 256m) and pids=P, comma separated.
func ParsePool(s string) (docker.PoolSpec, error) {
	parts := strings.Split(s, ",")
	p, err := docker.ParsePoolSpec(parts[0])
	if err != nil {
		return p, err
	}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "cpus":
			p.CPUs, err = strconv.ParseFloat(v, 64)
			if err == nil && (p.CPUs <= 0 || math.IsInf(p.CPUs, 0) || math.IsNaN(p.CPUs)) {
				err = errors.New("not a positive number")
			}
		case "memory":
			p.MemoryBytes, err = bytesize.Parse(v)
			if err == nil && p.MemoryBytes <= 0 {
				err = errors.New("not a positive size")
			}
		case "pids":
			p.PidsLimit, err = strconv.ParseInt(v, 10, 64)
			if err == nil && p.PidsLimit <= 0 {
				err = errors.New("not a positive number")
			}
		default:
			err = errors.New("unknown limit (cpus, memory or pids)")
		}
		if err != nil {
			return docker.PoolSpec{}, fmt.Errorf("pool %q: %q: %w", s, kv, err)
		}
	}
	return p, nil
}
