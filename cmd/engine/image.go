package main

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/client"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

// imageCmd serves `engine image build-base [--tag T] [--busybox PATH]`: it
// builds the sandbox base image on the local Docker engine FROM scratch out
// of a static busybox (Debian: apt-get install busybox-static), so that no
// registry is needed. It prints the tag.
func imageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build-base" {
		return usageErr("usage: engine image build-base [--tag %s] [--busybox %s]", docker.BaseImage, docker.DefaultBusybox)
	}
	fs := newFlagSet("image build-base", stderr)
	tag := fs.String("tag", docker.BaseImage, "tag of the image")
	busybox := fs.String("busybox", docker.DefaultBusybox, "statically linked busybox binary to build from")
	pos, _, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("image build-base takes no arguments")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "docker client")
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "no Docker engine answers")
	}
	if err := docker.BuildBaseImage(ctx, cli, *tag, *busybox); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "")
	}
	fmt.Fprintln(stdout, *tag)
	return nil
}
