package docker

import (
	"context"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/errdefs"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/images"
)

// ensureImage makes sure the image is on the engine, pulling it within
// PullTimeout if a registry is reachable, and returns its id.
func (r *Runtime) ensureImage(ctx context.Context, ref string) (string, error) {
	img, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return img.ID, nil
	}
	if !errdefs.IsNotFound(err) {
		return "", r.wrap(err, "inspect image "+ref)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PullTimeout)
	defer cancel()
	if perr := r.pull(pctx, ref); perr != nil {
		if ctx.Err() != nil {
			return "", errcode.Wrap(errcode.Unavailable, ctx.Err(), "docker: pull "+ref)
		}
		// The daemon's pull error stays in the cause, off the wire.
		msg := "image " + ref + " is not on the node and cannot be pulled"
		if ref == images.Base {
			msg += "; build it on the node with: engine image build-base (needs Debian's busybox-static)"
		}
		return "", errcode.Wrap(errcode.ImageNotFound, perr, msg)
	}
	img, err = r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", r.wrap(err, "inspect pulled image "+ref)
	}
	return img.ID, nil
}

func (r *Runtime) pull(ctx context.Context, ref string) error {
	rc, err := r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	return images.ProgressErr(rc)
}
