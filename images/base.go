package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Base is the tag of the sandbox base image that `engine image
// build-base` and the tests build, and the default image of a create.
const Base = "paddock/sandbox-base:test"

// DefaultBusybox is where Debian's busybox-static package installs its
// binary.
const DefaultBusybox = "/bin/busybox"

// BuildBase makes a minimal sandbox image under tag, FROM scratch out
// of a static busybox binary (every applet busybox --list names as a link
// in /bin), with root and nobody (65534) users, /tmp (1777), and
// /workspace owned by nobody; PATH=/bin, WORKDIR /workspace. No registry
// and no docker CLI are needed: the root file system is made in memory and
// handed to the engine's image import, which keeps the archive's owners
// and makes one layer (a Dockerfile build's COPY would make /workspace
// root's). It returns an error for a busybox that is missing or not
// statically linked (see CheckBusybox) and for the engine's failures.
func BuildBase(ctx context.Context, cli *client.Client, tag, busybox string) error {
	if err := CheckBusybox(busybox); err != nil {
		return err
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("base image: %w (on Debian: apt-get install busybox-static)", err)
	}
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("base image: %s --list: %w", busybox, err)
	}
	rootfs, err := baseRootfs(bin, strings.Fields(string(out)))
	if err != nil {
		return err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, tag,
		image.ImportOptions{Changes: []string{"ENV PATH=/bin", "WORKDIR /workspace"}, Message: "paddock sandbox base (busybox-static)"})
	if err != nil {
		return fmt.Errorf("base image: import: %w", err)
	}
	defer rc.Close()
	if err := ProgressErr(rc); err != nil {
		return fmt.Errorf("base image: import: %w", err)
	}
	return nil
}

// CheckBusybox returns an error unless p is a statically linked ELF
// binary (FROM scratch has no loader or libc), as Debian's busybox-static
// installs it; the error says how to get one.
func CheckBusybox(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("base image: %s is missing or not an ELF binary (on Debian: apt-get install busybox-static): %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("base image: %s is dynamically linked (on Debian: apt-get install busybox-static)", p)
		}
	}
	return nil
}

// baseRootfs returns the image's file system as a tar.
func baseRootfs(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	add := func(h *tar.Header, data []byte) error {
		h.ModTime = now
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	dir := func(name string, mode int64, id int) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: id, Gid: id}
	}
	file := func(name string, mode int64, data []byte) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}
	}
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/workspace:/bin/sh\n")
	group := []byte("root:x:0:\nnogroup:x:65534:\n")
	entries := []struct {
		h    *tar.Header
		data []byte
	}{
		{dir("bin/", 0o755, 0), nil},
		{file("bin/busybox", 0o755, busybox), busybox},
		{dir("etc/", 0o755, 0), nil},
		{file("etc/passwd", 0o644, passwd), passwd},
		{file("etc/group", 0o644, group), group},
		{dir("root/", 0o700, 0), nil},
		{dir("tmp/", 0o1777, 0), nil},
		{dir("workspace/", 0o755, 65534), nil},
	}
	for _, e := range entries {
		if err := add(e.h, e.data); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if a == "busybox" || strings.ContainsAny(a, "/ ") {
			continue
		}
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EnsureBase makes sure the sandbox base image is on the engine under
// tag, building it from busybox (see BuildBase) when it is missing. It
// reports whether it built it; when it cannot (no static busybox), the
// error says which package and command give it.
func EnsureBase(ctx context.Context, cli *client.Client, tag, busybox string) (bool, error) {
	return EnsureBaseFrom(ctx, cli, tag, BaseSource{Busybox: busybox})
}

// ProgressErr reads the Docker daemon's JSON progress stream of an image
// import or pull to its end and returns the failure it reports inside it,
// if any (the call itself succeeds either way).
func ProgressErr(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}
