package main

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/client"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/images"
)

// imageCmd serves `engine image build-base [--tag T] [--busybox PATH]`: it
// builds the sandbox base image on the local Docker engine FROM scratch out
// of a static busybox (Debian: apt-get install busybox-static), so that no
// registry is needed. It prints the tag. `engine image build-python` builds
// the image with Python and git (pythonImageCmd).
func imageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "build-python" {
		return pythonImageCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "build-base" {
		return usageErr("usage: engine image build-base [--tag %s] [--busybox %s] | engine image build-python [--tag %s] [--suite S] [--mirror URL] [--cache-dir D] [--rootfs DIR]", images.Base, images.DefaultBusybox, images.Python)
	}
	fs := newFlagSet("image build-base", stderr)
	tag := fs.String("tag", images.Base, "tag of the image")
	busybox := fs.String("busybox", images.DefaultBusybox, "statically linked busybox binary to build from")
	jsonOut := fs.Bool("json", false, "print {\"tag\": ...}")
	pos, _, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("image build-base takes no arguments")
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := images.BuildBase(ctx, cli, *tag, *busybox); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "")
	}
	if *jsonOut {
		return printJSON(stdout, imageResult{Tag: *tag})
	}
	fmt.Fprintln(stdout, *tag)
	return nil
}

// pythonImageCmd serves `engine image build-python [--tag T] [--suite S]
// [--mirror URL] [--cache-dir D] [--rootfs DIR]`: it builds the sandbox
// image with Python and git from Debian's packages (debootstrap
// --variant=minbase, as root, once per machine: the root file system is
// cached) and prints the tag. Nodes must allow it: --allow-image.
func pythonImageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("image build-python", stderr)
	tag := fs.String("tag", images.Python, "tag of the image")
	var cfg images.PythonConfig
	fs.StringVar(&cfg.Suite, "suite", "bookworm", "Debian release")
	fs.StringVar(&cfg.Mirror, "mirror", "http://deb.debian.org/debian", "Debian mirror")
	fs.StringVar(&cfg.CacheDir, "cache-dir", "", "where the root file system tarball is kept (default: <user cache dir>/paddock)")
	fs.StringVar(&cfg.Rootfs, "rootfs", "", "an existing debootstrap tree to pack instead of running debootstrap")
	jsonOut := fs.Bool("json", false, "print {\"tag\": ...}")
	pos, _, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("image build-python takes no arguments")
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := images.BuildPython(ctx, cli, *tag, cfg); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "")
	}
	if *jsonOut {
		return printJSON(stdout, imageResult{Tag: *tag})
	}
	fmt.Fprintln(stdout, *tag)
	return nil
}

// dockerClient returns a client of the local Docker engine once it answers.
func dockerClient(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "docker client")
	}
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, errcode.Wrap(errcode.Unavailable, err, "no Docker engine answers")
	}
	return cli, nil
}
