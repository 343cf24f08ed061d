package main

import (
	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/runtimes"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes"
)

// A first `engine serve` makes the sandbox images its node lacks: the
// base image from a static busybox, installing Debian's busybox-static
// with apt-get when it runs as root and the binary is missing, and with
// --python-image the Python image too (pulled where a registry answers,
// else built from Debian's packages and cached). See
// cmd/internal/runtimes/images.go and docs/operations.md.

// registerFirstRunFlags adds --python-image to serve's flags.
func registerFirstRunFlags(fs *flag.FlagSet, cfg *serveConfig) {
	fs.BoolVar(&cfg.pythonImage, "python-image", false, "make sure the Python sandbox image "+images.Python+" is there (pulled from "+images.PythonRegistryImage+" where a registry answers, else built from Debian's packages with debootstrap: minutes the first time, cached after) and let creates name it")
}

// imageOptions says what the in-process node's first start may do to make
// its sandbox images.
func (cfg *serveConfig) imageOptions() runtimes.ImageOptions {
	return runtimes.ImageOptions{Install: true, Python: cfg.pythonImage}
}

// allowPythonImage adds the Python image to the images creates may name
// when --python-image asks for it (the default base image stays allowed).
func (cfg *serveConfig) allowPythonImage(p nodes.Policy) nodes.Policy {
	if !cfg.pythonImage {
		return p
	}
	if len(p.Images) == 0 {
		p.Images = []string{commands.DefaultImage}
	}
	p.Images = append(p.Images, images.Python)
	return p
}
