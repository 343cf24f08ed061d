// Package diskflags holds the free-space flags of engine serve and
// agent-node (--disk-warn, --disk-critical, --disk-interval) and the
// directories a node's sandboxes fill, which both watch with a
// storage.DiskWatcher.
package diskflags

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/storage"
)

// Flags are the free-space thresholds for the filesystems a command
// writes to (engine serve: its state dir; a node: its Docker data root or
// sandbox dir).
type Flags struct {
	warn, critical string
	interval       time.Duration
}

// Register registers the flags on fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	def := storage.DefaultThresholds()
	fs.StringVar(&f.warn, "disk-warn", thresholdFlag(def.Warn), "warn when a filesystem the engine writes to has less free than this: PERCENT%, SIZE, or both (whichever is smaller)")
	fs.StringVar(&f.critical, "disk-critical", thresholdFlag(def.Critical), "below this much free (PERCENT%, SIZE, or both: whichever is smaller) the node refuses new sessions (no_capacity)")
	fs.DurationVar(&f.interval, "disk-interval", 5*time.Second, "how often the free space of those filesystems is read")
	return f
}

// thresholdFlag writes t as the flags take it.
func thresholdFlag(t storage.Threshold) string {
	var parts []string
	if t.Percent > 0 {
		parts = append(parts, strconv.FormatFloat(t.Percent, 'g', -1, 64)+"%")
	}
	if t.Bytes > 0 {
		parts = append(parts, flagSize(t.Bytes))
	}
	return strings.Join(parts, ",")
}

// parseThreshold reads "10%", "2g" or "10%,2g".
func parseThreshold(name, s string) (storage.Threshold, error) {
	var t storage.Threshold
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if pct, ok := strings.CutSuffix(p, "%"); ok {
			v, err := strconv.ParseFloat(pct, 64)
			if err != nil || v <= 0 || v > 100 || t.Percent != 0 {
				return t, usageErr("--%s %q: a percentage is a number in (0, 100], once", name, s)
			}
			t.Percent = v
			continue
		}
		n, err := bytesize.Parse(p)
		if err != nil || n <= 0 || t.Bytes != 0 {
			return t, usageErr("--%s %q: give PERCENT%%, SIZE (e.g. 2g) or both, separated by a comma", name, s)
		}
		t.Bytes = uint64(n)
	}
	return t, nil
}

// Thresholds returns the thresholds the flags give; a value that does not
// parse is invalid_request.
func (f *Flags) Thresholds() (storage.Thresholds, error) {
	w, err := parseThreshold("disk-warn", f.warn)
	if err != nil {
		return storage.Thresholds{}, err
	}
	c, err := parseThreshold("disk-critical", f.critical)
	if err != nil {
		return storage.Thresholds{}, err
	}
	if f.interval <= 0 {
		return storage.Thresholds{}, usageErr("--disk-interval %s: give a positive duration", f.interval)
	}
	return storage.Thresholds{Warn: w, Critical: c}, nil
}

// DataDirs returns the directories a node with runtimes rts fills as its
// sandboxes write (sandboxDir for the local runtime), and Docker's data root when
// the node runs Docker sandboxes on a local daemon. It logs, and leaves
// out, a data root it cannot learn.
func DataDirs(ctx context.Context, rts []runtime.Runtime, sandboxDir string, logger *slog.Logger) (dirs []string, dockerRoot string) {
	for _, rt := range rts {
		switch rt.Name() {
		case "local":
			dirs = append(dirs, sandboxDir)
		case "docker":
			root, err := runtimes.DockerRootDir(ctx)
			if err != nil {
				logger.Warn("storage: cannot learn Docker's data root; its free space is not watched", "err", err)
				continue
			}
			if root != "" {
				dirs, dockerRoot = append(dirs, root), root
			}
		}
	}
	return dirs, dockerRoot
}

// flagSize writes n as the size flags take it (2g, 512m, or bytes).
func flagSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	}
	return strconv.FormatUint(n, 10)
}

// Watcher returns a watcher of paths with the flags' thresholds.
func (f *Flags) Watcher(paths []string, logger *slog.Logger) (*storage.DiskWatcher, error) {
	t, err := f.Thresholds()
	if err != nil {
		return nil, err
	}
	return storage.NewDiskWatcher(storage.DiskWatchConfig{Paths: paths, Thresholds: &t, Interval: f.interval}, logger)
}

func usageErr(format string, a ...any) error {
	return errcode.New(errcode.InvalidRequest, format, a...)
}
