package nodes

import (
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/storage"
)

// Disks is what the node asks of a watcher of its filesystems'
// free space (storage.DiskWatcher).
type Disks interface {
	// Disks returns each watched filesystem as last looked at.
	Disks() []storage.Disk
	// Critical returns a watched filesystem at level critical, if any.
	Critical() (storage.Disk, bool)
}

var _ Disks = (*storage.DiskWatcher)(nil)

// diskFull returns the no_capacity error a create gets while one of the
// node's filesystems is critically full (nil when none is): a session
// made now would fail its first write, or fill the disk the events are on.
// The scheduler tries another node on no_capacity, and places none here
// while the heartbeats say critical.
func (a *Agent) diskFull() error {
	if a.cfg.Disks == nil {
		return nil
	}
	d, ok := a.cfg.Disks.Critical()
	if !ok {
		return nil
	}
	return errcode.New(errcode.NoCapacity, "node %s: the filesystem of %s is critically full (%d of %d bytes free): no new sessions until space is freed", a.cfg.ID, d.Path, d.Free, d.Total)
}

// disks is the heartbeat's view of the node's filesystems.
func (a *Agent) disks() []events.DiskStatus {
	if a.cfg.Disks == nil {
		return nil
	}
	var out []events.DiskStatus
	for _, d := range a.cfg.Disks.Disks() {
		if d.Err != nil {
			continue
		}
		out = append(out, events.DiskStatus{Path: d.Path, Free: d.Free, Total: d.Total, Level: d.Level.String()})
	}
	return out
}
