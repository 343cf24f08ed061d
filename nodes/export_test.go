package nodes

import "context"

// WatchTeardown makes report tell each teardown hook a runs, as it runs:
// the session's id, the hook's name, and why the session's parts end (""
// when the node only lets the session go). Call it before a.Start.
func WatchTeardown(a *Agent, report func(session, hook, why string)) {
	for i, h := range a.teardowns {
		run, name := h.run, h.name
		a.teardowns[i].run = func(ctx context.Context, s *session, e ending) error {
			report(s.id, name, e.why)
			return run(ctx, s, e)
		}
	}
}

// TeardownHooks returns the names of a's teardown hooks, in their order.
func TeardownHooks(a *Agent) []string {
	var out []string
	for _, h := range a.teardowns {
		out = append(out, h.name)
	}
	return out
}

// SetSnapshotFormat makes a persist in the format f (Config.Snapshots)
// from now on: the benchmarks compare both on one workspace. Call it
// between operations, never during one.
func SetSnapshotFormat(a *Agent, f string) { a.cfg.Snapshots = f }

// SetTarRestore makes a manifest restore go through a tar into the
// runtime's staging (on) even where the runtime stages on the host, as a
// runtime that does not would: tests cover that path, benchmarks compare
// both in one run.
func SetTarRestore(a *Agent, on bool) { a.tarRestore.Store(on) }

// ScanCounts returns how many scans of the session's workspace were full
// and how many incremental (dirty tracking) on a.
func ScanCounts(a *Agent, tenant, id string) (full, incremental int) {
	a.mu.Lock()
	s := a.sessions[sessionKey(tenant, id)]
	a.mu.Unlock()
	if s == nil {
		return 0, 0
	}
	return s.content.track.counts()
}

// SetDirtyTracking turns dirty tracking (Config.DirtyTracking) on or off
// from now on: benchmarks compare both on one workspace. Call it between
// operations, never during one.
func SetDirtyTracking(a *Agent, on bool) { a.cfg.DirtyTracking = &on }

// SetKeptTrees turns restores from kept trees on or off (on: when the
// node has a tree cache and overlays can be mounted).
func SetKeptTrees(a *Agent, on bool) { a.keptOff.Store(!on) }
