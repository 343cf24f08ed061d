// Package images builds what a Docker node puts into its sandboxes: the
// sandbox images (the busybox base FROM scratch, the Debian one with
// Python and git), assembled as root file system tarballs and handed to
// the engine's image import, and the static in-sandbox supervisor binary
// the node bind-mounts into every container.
//
// It is apart from the Docker runtime (nodes/runtime/docker), which only
// runs sandboxes of images that exist: `engine image build-base` and
// `build-python` (cmd/engine), the serving engine's first start
// (cmd/internal/runtimes) and the tests (testenv) build through it.
package images
