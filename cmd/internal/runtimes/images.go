package runtimes

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/docker/docker/client"

	"github.com/paddock-dev/paddock/images"
)

// ImageOptions says what a node's first start may do to make the sandbox
// images it lacks.
type ImageOptions struct {
	// Install lets it install the base image's static busybox with the
	// machine's package manager (apt-get, as root) when it is missing.
	Install bool
	// Python makes sure the Python image (images.Python) is there too:
	// pulled from a registry where one answers, else built from Debian's
	// packages (minutes once; cached).
	Python bool
	// PythonBuild says how to build the Python image (the zero value:
	// images.PythonConfig's defaults).
	PythonBuild images.PythonConfig
}

// ensureImages makes the sandbox images opts asks for when they are
// missing, with their progress on the log, so that a first `engine serve`
// on a fresh machine can create sessions; when it cannot, it says on the
// log what to install and run. Creates of a missing image fail with
// image_not_found until then.
func ensureImages(ctx context.Context, opts ImageOptions, logger *slog.Logger) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		logger.Warn("no sandbox base image", "image", images.Base, "err", err)
		return
	}
	defer cli.Close()
	progress := newLogWriter(logger.With("component", "images"))
	defer progress.Close()
	src := images.BaseSource{Progress: progress}
	if opts.Install {
		src.Install = images.AptInstall
	}
	built, err := images.EnsureBaseFrom(ctx, cli, images.Base, src)
	switch {
	case err != nil:
		logger.Warn("no sandbox base image", "image", images.Base, "err", err)
	case built:
		logger.Info("built the sandbox base image", "image", images.Base)
	}
	if !opts.Python {
		return
	}
	how, err := images.EnsurePython(ctx, cli, images.Python, images.PythonSource{Build: opts.PythonBuild, Progress: progress})
	if err != nil {
		logger.Warn("no Python sandbox image", "image", images.Python, "err", err)
		return
	}
	logger.Info("the Python sandbox image is ready", "image", images.Python, "how", how)
}

// logWriter logs each line written to it at info level: the progress of
// apt-get, of a pull or of a build.
type logWriter struct {
	pw   *io.PipeWriter
	done chan struct{}
}

// newLogWriter starts the goroutine that reads lines for logger; Close
// stops it and waits for it.
func newLogWriter(logger *slog.Logger) *logWriter {
	pr, pw := io.Pipe()
	w := &logWriter{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				logger.Info(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr) // a line past the buffer: drain, so writers never block
	}()
	return w
}

func (w *logWriter) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Close ends the log of lines and waits until the last one is logged.
func (w *logWriter) Close() error {
	err := w.pw.Close()
	<-w.done
	return err
}
