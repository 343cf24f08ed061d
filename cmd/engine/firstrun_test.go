package main

import (
	"slices"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes"
)

// TestAllowPythonImage: --python-image lets creates name the Python image
// beside what the operator allowed (the base image when nothing), and
// without it the policy is the operator's.
func TestAllowPythonImage(t *testing.T) {
	for _, c := range []struct {
		python bool
		images []string
		want   []string
	}{
		{false, nil, nil},
		{true, nil, []string{commands.DefaultImage, images.Python}},
		{true, []string{"registry.test/team/*"}, []string{"registry.test/team/*", images.Python}},
	} {
		cfg := serveConfig{pythonImage: c.python}
		got := cfg.allowPythonImage(nodes.Policy{Images: c.images}).Images
		if !slices.Equal(got, c.want) {
			t.Errorf("--python-image=%v with %v: images %v, want %v", c.python, c.images, got, c.want)
		}
		if opts := cfg.imageOptions(); !opts.Install || opts.Python != c.python {
			t.Errorf("--python-image=%v: image options %+v, want install and python %v", c.python, opts, c.python)
		}
	}
	// The policy it makes is one a node accepts.
	cfg := serveConfig{pythonImage: true}
	if err := cfg.allowPythonImage(nodes.Policy{}).Validate(); err != nil {
		t.Errorf("the policy with the Python image: %v", err)
	}
}
