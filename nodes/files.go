package nodes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"sort"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/objectstore"
)

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func readStart(_ *Agent, _ *session, args *commands.ReadArgs) any {
	return events.PathStart{Path: args.Path}
}

// runRead reads a whole file: inline up to the inline limit, through a
// temporary object of the workspace bucket above it.
func runRead(ctx context.Context, a *Agent, s *session, args *commands.ReadArgs) (outcome, error) {
	b, mode, err := s.sandbox().ReadFile(ctx, args.Path, commands.InlineLimit)
	if errcode.Of(err) == errcode.PayloadTooLarge {
		return a.readLarge(ctx, s, args.Path)
	}
	if err != nil {
		return outcome{}, err
	}
	sum := digest(b)
	return outcome{
		result: commands.ReadResult{Content: b, Size: int64(len(b)), Mode: uint32(mode.Perm()), SHA256: sum},
		data:   events.ReadFinish{Size: int64(len(b)), SHA256: sum},
	}, nil
}

// readLarge streams a file over the inline limit into a temporary object
// of the workspace bucket, which the reader fetches and deletes.
func (a *Agent) readLarge(ctx context.Context, s *session, p string) (outcome, error) {
	store, err := a.workspaces(ctx)
	if err != nil {
		return outcome{}, err
	}
	pr, pw := io.Pipe()
	h := sha256.New()
	type read struct {
		n    int64
		mode fs.FileMode
		err  error
	}
	done := make(chan read, 1)
	go func() { // ends when the file is read or the upload stops reading
		n, mode, err := s.sandbox().ReadFileTo(ctx, p, io.MultiWriter(pw, h), commands.MaxFileBytes)
		pw.CloseWithError(err)
		done <- read{n, mode, err}
	}()
	name, err := store.Upload(ctx, s.tenant, uuid.NewString(), pr)
	pr.CloseWithError(err)
	rd := <-done
	if rd.err != nil {
		if name != "" {
			_ = store.Delete(context.WithoutCancel(ctx), name)
		}
		return outcome{}, rd.err
	}
	if err != nil {
		return outcome{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return outcome{
		result: commands.ReadResult{Size: rd.n, Mode: uint32(rd.mode.Perm()), Download: name, SHA256: sum},
		data:   events.ReadFinish{Size: rd.n, SHA256: sum},
	}, nil
}

// fileMode is a write's mode, 0644 when it names none.
func fileMode(m uint32) fs.FileMode {
	if m == 0 {
		return 0o644
	}
	return fs.FileMode(m)
}

func writeStart(_ *Agent, _ *session, args *commands.WriteArgs) any {
	if args.Upload != "" {
		return events.WriteStart{Path: args.Path, Size: args.Size, Mode: uint32(fileMode(args.Mode)), Upload: true}
	}
	return events.WriteStart{Path: args.Path, Size: int64(len(args.Content)), SHA256: digest(args.Content), Mode: uint32(fileMode(args.Mode))}
}

// runWrite writes a whole file: inline content, or an upload the client
// put into the workspace bucket.
func runWrite(ctx context.Context, a *Agent, s *session, args *commands.WriteArgs) (outcome, error) {
	mode := fileMode(args.Mode)
	if args.Upload != "" {
		return a.writeLarge(ctx, s, args, mode)
	}
	changed, err := a.writeFile(ctx, s, args.Path, bytes.NewReader(args.Content), int64(len(args.Content)), mode)
	if err != nil {
		return outcome{}, err
	}
	d := events.WriteFinish{Size: int64(len(args.Content)), SHA256: digest(args.Content), Changes: changed}
	return outcome{result: commands.WriteResult{Size: d.Size, SHA256: d.SHA256}, data: d}, nil
}

// writeLarge writes a file whose content a client uploaded to the
// workspace bucket: it downloads it to a temporary file (digest checked),
// streams it into the sandbox and deletes the upload.
func (a *Agent) writeLarge(ctx context.Context, s *session, args *commands.WriteArgs, mode fs.FileMode) (outcome, error) {
	if err := objectstore.CheckUpload(s.tenant, args.Upload); err != nil {
		return outcome{}, err
	}
	store, err := a.workspaces(ctx)
	if err != nil {
		return outcome{}, err
	}
	f, err := os.CreateTemp("", "paddock-write-*")
	if err != nil {
		return outcome{}, errcode.Wrap(errcode.Internal, err, "temporary file")
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum, err := store.FetchObject(ctx, args.Upload, f, nil)
	if errcode.Of(err) == errcode.SnapshotNotFound {
		return outcome{}, errcode.New(errcode.NotFound, "no upload %s", args.Upload)
	}
	if err != nil {
		return outcome{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		return outcome{}, errcode.Wrap(errcode.Internal, err, "temporary file")
	}
	if fi.Size() != args.Size {
		return outcome{}, errcode.New(errcode.InvalidRequest, "the upload holds %d bytes, the write says %d", fi.Size(), args.Size)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return outcome{}, errcode.Wrap(errcode.Internal, err, "temporary file")
	}
	changed, err := a.writeFile(ctx, s, args.Path, f, args.Size, mode)
	if err != nil {
		return outcome{}, err
	}
	_ = store.Delete(context.WithoutCancel(ctx), args.Upload)
	d := events.WriteFinish{Size: args.Size, SHA256: sum, Changes: changed}
	return outcome{result: commands.WriteResult{Size: d.Size, SHA256: d.SHA256}, data: d}, nil
}

func lsStart(_ *Agent, _ *session, args *commands.LsArgs) any {
	return events.LsStart{Path: args.Path, Limit: args.Limit, After: args.After}
}

// pager is a sandbox that lists one page of a directory without reading
// every entry's metadata (the local runtime).
type pager interface {
	ListPage(ctx context.Context, path, after string, limit int) ([]commands.Entry, bool, error)
}

// runLs lists a directory a page at a time, so that every reply fits: the
// entries named after args.After, sorted by name, at most the limit.
func runLs(ctx context.Context, _ *Agent, s *session, args *commands.LsArgs) (outcome, error) {
	limit := args.Limit
	if limit == 0 {
		limit = commands.DefaultLsLimit
	}
	page, more, err := listPage(ctx, s.sandbox(), args.Path, args.After, limit)
	if err != nil {
		return outcome{}, err
	}
	res := commands.LsResult{Entries: append([]commands.Entry{}, page...)}
	if more {
		res.Next = page[len(page)-1].Name
	}
	return outcome{result: res, data: events.LsFinish{Entries: len(res.Entries), More: more}}, nil
}

// listPage returns the page through the sandbox's pager, or cuts it from
// the whole listing.
func listPage(ctx context.Context, sb runtime.Sandbox, p, after string, limit int) ([]commands.Entry, bool, error) {
	if pg, ok := sb.(pager); ok {
		return pg.ListPage(ctx, p, after, limit)
	}
	entries, err := sb.List(ctx, p)
	if err != nil {
		return nil, false, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	from := 0
	if after != "" {
		from = sort.Search(len(entries), func(i int) bool { return entries[i].Name > after })
	}
	page := entries[from:]
	if len(page) > limit {
		return page[:limit], true, nil
	}
	return page, false, nil
}

func rmStart(_ *Agent, _ *session, args *commands.RmArgs) any {
	return events.RmStart{Path: args.Path, Recursive: args.Recursive, Force: args.Force}
}

// runRm removes a path; with force a missing one is no error, as rm -f
// has it.
func runRm(ctx context.Context, a *Agent, s *session, args *commands.RmArgs) (outcome, error) {
	changed, err := a.remove(ctx, s, args.Path, args.Recursive)
	removed := err == nil
	if errcode.Of(err) == errcode.NotFound && args.Force {
		err = nil
	}
	if err != nil {
		return outcome{}, err
	}
	return outcome{result: struct{}{}, data: events.RmFinish{Removed: removed, Changes: changed}}, nil
}

func mkdirStart(_ *Agent, _ *session, args *commands.MkdirArgs) any {
	return events.MkdirStart{Path: args.Path, Parents: args.Parents}
}

func runMkdir(ctx context.Context, a *Agent, s *session, args *commands.MkdirArgs) (outcome, error) {
	changed, err := a.mkdir(ctx, s, args.Path, args.Parents)
	if err != nil {
		return outcome{}, err
	}
	return outcome{result: struct{}{}, data: events.MkdirFinish{Changes: changed}}, nil
}
