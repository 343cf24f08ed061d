package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/storage"
)

// healFree is the free space the embedded server's store needs before the
// broker restarts JetStream after the disk filled: the critical threshold
// of the store's filesystem, and at least 16 MiB.
func healFree(stateDir string, t storage.Thresholds) int64 {
	const floor = 16 << 20
	d, err := storage.Stat(stateDir, t)
	if err != nil {
		return floor
	}
	return max(floor, int64(t.Critical.FreeBytes(d.Total)))
}

// warnSharedFilesystem logs a warning when the state dir (the events and
// snapshots) is on the filesystem of Docker's data root: sandboxes that
// fill their writable layers fill the disk the record is written to.
func warnSharedFilesystem(stateDir, dockerRoot string, logger *slog.Logger) {
	if dockerRoot == "" {
		return
	}
	same, err := storage.SameFilesystem(stateDir, dockerRoot)
	if err != nil {
		logger.Warn("storage: cannot tell whether the state dir shares a filesystem with Docker's data root", "err", err)
		return
	}
	if same {
		logger.Warn("storage: the state dir is on the same filesystem as Docker's data root: sandboxes that fill their disks fill the one the events are written to; put --state-dir on another filesystem, or give sandboxes disk limits",
			"state_dir", stateDir, "docker_root", dockerRoot)
	}
}

// printDisks prints the free space of the nodes' filesystems (heartbeats),
// with a warning for those below a threshold.
func printDisks(tw io.Writer, ns []nodes.Info) {
	var header bool
	for _, n := range ns {
		for _, d := range n.Disks {
			if !header {
				fmt.Fprintln(tw)
				fmt.Fprintln(tw, "DISK\tPATH\tFREE\tSIZE\tLEVEL")
				header = true
			}
			level := d.Level
			switch d.Level {
			case storage.LevelWarn.String():
				level = "WARNING: low on free space"
			case storage.LevelCritical.String():
				level = "CRITICAL: the node refuses new sessions until space is freed"
			}
			pct := 0.0
			if d.Total > 0 {
				pct = 100 * float64(d.Free) / float64(d.Total)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s (%.1f%%)\t%s\t%s\n", n.Node, d.Path, humanBytes(d.Free), pct, humanBytes(d.Total), level)
		}
	}
}

// humanBytes writes n in the largest binary unit that keeps it >= 1.
func humanBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
