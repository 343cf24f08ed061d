package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// upload sends r, chunk by chunk, through the engine's transfer service
// (commands/transfer.go) and returns the object's name and size. It needs
// no access to the workspace bucket, which a tenant's account does not
// have.
func (c *Client) upload(ctx context.Context, r io.Reader) (string, int64, error) {
	var open commands.TransferOpened
	if err := c.request(ctx, c.subj.Upload(c.opts.Tenant), "", commands.UploadArgs{}, &open, 0, nil); err != nil {
		return "", 0, err
	}
	size := min(max(open.ChunkBytes, 1), commands.TransferChunkBytes)
	buf := make([]byte, size)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		last := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !last {
			return "", off, errcode.Wrap(errcode.InvalidRequest, err, "read content")
		}
		var p commands.UploadProgress
		if err := c.request(ctx, open.Subject, "", commands.UploadChunk{Offset: off, Data: buf[:n], Last: last}, &p, 0, nil); err != nil {
			return "", off, err
		}
		off += int64(n)
		if p.Received != off {
			return "", off, errcode.New(errcode.Unavailable, "upload: the engine has %d bytes, %d were sent", p.Received, off)
		}
		if last {
			return p.Upload, off, nil
		}
	}
}

// download streams the object name (a ReadResult.Download) to w through
// the transfer service; the engine deletes it once read.
func (c *Client) download(ctx context.Context, name string, w io.Writer) (int64, error) {
	var open commands.TransferOpened
	if err := c.request(ctx, c.subj.Download(c.opts.Tenant), "", commands.DownloadArgs{Name: name}, &open, 0, nil); err != nil {
		return 0, err
	}
	var off int64
	for {
		var d commands.DownloadData
		if err := c.request(ctx, open.Subject, "", commands.DownloadChunk{Offset: off}, &d, 0, nil); err != nil {
			return off, err
		}
		n, err := w.Write(d.Data)
		off += int64(n)
		if err != nil {
			return off, err
		}
		if d.Last {
			return off, nil
		}
	}
}

// discard deletes an upload the client no longer needs (best effort).
func (c *Client) discard(ctx context.Context, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = c.request(dctx, c.subj.Upload(c.opts.Tenant), "", commands.UploadArgs{Discard: name}, nil, 0, nil)
}
