package bench_test

import (
	"context"
	"io"
	"io/fs"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// noop is a runtime whose sandboxes do nothing and succeed at once: an
// exec exits 0 with no output. It lets a benchmark run many nodes and
// sessions on one machine and measure Paddock's path alone (NATS, the
// scheduler, the events), not a runtime. Test-only on purpose.
type noop struct{}

var _ runtime.Runtime = noop{}

func (noop) Name() string { return "noop" }

func (noop) Create(context.Context, runtime.Spec) (runtime.Sandbox, error) { return noopSandbox{}, nil }

// noopSandbox is a sandbox of the noop runtime.
type noopSandbox struct{}

var _ runtime.Sandbox = noopSandbox{}

func (noopSandbox) Start(context.Context) error                { return nil }
func (noopSandbox) Stop(context.Context) error                 { return nil }
func (noopSandbox) Shutdown(context.Context) error             { return nil }
func (noopSandbox) Running(context.Context) (bool, error)      { return true, nil }
func (noopSandbox) Mkdir(context.Context, string, bool) error  { return nil }
func (noopSandbox) Remove(context.Context, string, bool) error { return nil }

func (noopSandbox) Exec(context.Context, runtime.ExecSpec) (runtime.ExecResult, error) {
	return runtime.ExecResult{}, nil
}

func (noopSandbox) ReadFile(context.Context, string, int64) ([]byte, fs.FileMode, error) {
	return nil, 0o644, nil
}

func (noopSandbox) ReadFileTo(context.Context, string, io.Writer, int64) (int64, fs.FileMode, error) {
	return 0, 0o644, nil
}

func (noopSandbox) WriteFile(context.Context, string, []byte, fs.FileMode) error { return nil }

func (noopSandbox) WriteFileFrom(_ context.Context, _ string, r io.Reader, _ int64, _ fs.FileMode) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

func (noopSandbox) List(context.Context, string) ([]commands.Entry, error) { return nil, nil }

func (noopSandbox) ExportWorkspace(context.Context, io.Writer, archive.Skip) (archive.Stats, error) {
	return archive.Stats{}, nil
}

func (noopSandbox) ImportWorkspace(_ context.Context, r io.Reader, _ archive.Limits) (archive.Stats, error) {
	_, err := io.Copy(io.Discard, r)
	return archive.Stats{}, err
}
