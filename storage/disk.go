package storage

import (
	"errors"
	"fmt"
	"syscall"
)

// Level is how full a filesystem is against Thresholds.
type Level int

// The levels, from best to worst.
const (
	// LevelOK: above the warning threshold.
	LevelOK Level = iota
	// LevelWarn: below the warning threshold; logged and shown by
	// `engine status`.
	LevelWarn
	// LevelCritical: below the critical threshold; a node refuses new
	// sessions (no_capacity) and the scheduler places none on it.
	LevelCritical
)

// String is the level's name as logs, heartbeats and `engine status`
// show it: ok, warn or critical.
func (l Level) String() string {
	switch l {
	case LevelWarn:
		return "warn"
	case LevelCritical:
		return "critical"
	}
	return "ok"
}

// Threshold is an amount of free space: Percent of the filesystem's size
// or Bytes, whichever is smaller, so that neither a small disk (where a
// fixed size is most of it) nor a large one (where a percentage is a lot
// of bytes) is flagged too early. A zero field is not used; a zero
// Threshold is never crossed.
type Threshold struct {
	Percent float64
	Bytes   uint64
}

// FreeBytes returns the free bytes below which a filesystem of total
// bytes is past t (0: never).
func (t Threshold) FreeBytes(total uint64) uint64 {
	pct := uint64(t.Percent / 100 * float64(total))
	switch {
	case t.Percent <= 0:
		return t.Bytes
	case t.Bytes == 0:
		return pct
	}
	return min(pct, t.Bytes)
}

// String is the threshold as the flags take it ("10%,2147483648").
func (t Threshold) String() string {
	return fmt.Sprintf("%g%%,%d", t.Percent, t.Bytes)
}

// Thresholds are the free space at which a filesystem is warned about and
// at which it is critical.
type Thresholds struct {
	Warn, Critical Threshold
}

// DefaultThresholds: warn below 10% or 2 GiB free, critical below 2% or
// 512 MiB free (whichever is smaller, each).
func DefaultThresholds() Thresholds {
	return Thresholds{
		Warn:     Threshold{Percent: 10, Bytes: 2 << 30},
		Critical: Threshold{Percent: 2, Bytes: 512 << 20},
	}
}

// Validate checks the thresholds: percentages within 0..100.
func (t Thresholds) Validate() error {
	for _, p := range []float64{t.Warn.Percent, t.Critical.Percent} {
		if p < 0 || p > 100 {
			return fmt.Errorf("storage: threshold %g%% outside 0..100", p)
		}
	}
	return nil
}

// Level returns the level of a filesystem with free of total bytes free.
func (t Thresholds) Level(free, total uint64) Level {
	switch {
	case free < t.Critical.FreeBytes(total):
		return LevelCritical
	case free < t.Warn.FreeBytes(total):
		return LevelWarn
	}
	return LevelOK
}

// Disk is the free space of the filesystem that holds Path.
type Disk struct {
	Path string
	// Free is what an unprivileged writer may still use (statfs's
	// f_bavail), Total the filesystem's size.
	Free, Total uint64
	Level       Level
	// Err is why the filesystem could not be read (then the rest is zero
	// and Level is LevelOK: an unreadable path is logged, not refused).
	Err error
}

// Stat returns the free space of the filesystem that holds path, with its
// level against t. It fails when statfs does.
func Stat(path string, t Thresholds) (Disk, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Disk{Path: path}, fmt.Errorf("storage: statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize) //nolint:unconvert // int64 on linux/amd64, int32 elsewhere
	d := Disk{Path: path, Free: st.Bavail * bs, Total: st.Blocks * bs}
	d.Level = t.Level(d.Free, d.Total)
	return d, nil
}

// SameFilesystem reports whether paths a and b are on one filesystem
// (their st_dev is equal). It fails when either cannot be stat'ed.
func SameFilesystem(a, b string) (bool, error) {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return false, fmt.Errorf("storage: stat %s: %w", a, err)
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return false, fmt.Errorf("storage: stat %s: %w", b, err)
	}
	return sa.Dev == sb.Dev, nil
}

// OutOfSpace reports whether err is the filesystem refusing a write for
// want of space: ENOSPC, or EDQUOT (a quota).
func OutOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
