package transfer_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
	"github.com/paddock-dev/paddock/transfer"
)

// TestTenantClientMovesFiles: with auth on, a tenant's client, whose
// account has no JetStream, writes and reads files over the inline limit
// and hydrates from an archive, all through the transfer service; the
// temporary objects are gone afterwards.
func TestTenantClientMovesFiles(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, Tenant: "acme"})
	ctx := testenv.Context(t, time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3*commands.TransferChunkBytes+12345)
	_, _ = rand.Read(big)
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "big.bin", big, 0o644); err != nil {
		t.Fatalf("large write: %v", err)
	}
	got, err := st.Client.ReadFile(ctx, s.SessionID, "big.bin")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("large read: %d bytes, %v; want the %d written", len(got), err, len(big))
	}

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "docs/readme.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	if _, err := st.Client.HydrateFrom(ctx, s.SessionID, &archive); err != nil {
		t.Fatalf("hydrate from an archive: %v", err)
	}
	if got, err := st.Client.ReadFile(ctx, s.SessionID, "docs/readme.txt"); err != nil || string(got) != "hello" {
		t.Fatalf("after hydrate: %q, %v", got, err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := st.Transfers.Open(); n != 0 {
			return fmt.Errorf("%d transfers still open", n)
		}
		return nil
	})
	objs, err := testenv.JetStream(t, st.Engine).ObjectStore(ctx, "sbx_workspaces")
	if err != nil {
		t.Fatal(err)
	}
	list, _ := objs.List(ctx)
	for _, o := range list {
		if !o.Deleted && len(o.Name) > 8 && o.Name[:8] == "uploads/" {
			t.Errorf("temporary object %s left behind", o.Name)
		}
	}
}

// request sends args on subj as tenant acme's client and decodes the
// result into out, returning the wire error.
func request(t *testing.T, nc *nats.Conn, subj string, args, out any) error {
	t.Helper()
	b, _ := json.Marshal(args)
	body, _ := json.Marshal(commands.Request{Args: b})
	m, err := nc.Request(subj, body, 10*time.Second)
	if err != nil {
		return err
	}
	var rep commands.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Error != nil {
		return rep.Error.Err()
	}
	if out != nil {
		return json.Unmarshal(rep.Result, out)
	}
	return nil
}

// TestTransferRefusals: another tenant's objects, snapshots, chunks out of
// order and too many open transfers are refused with their codes; an idle
// transfer is aborted.
func TestTransferRefusals(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, Tenant: "acme"})
	nc := st.ClientConn
	subj := func(kind string) string { return "sbx.cmd.acme." + kind }
	for _, name := range []string{"uploads/evil/x", "acme/s/snap.tar", "uploads/acme/../evil/x", "uploads/acme/"} {
		if err := request(t, nc, subj("download"), commands.DownloadArgs{Name: name}, nil); !errors.Is(err, errcode.ErrPermissionDenied) {
			t.Errorf("download %q: %v, want permission_denied", name, err)
		}
		if err := request(t, nc, subj("upload"), commands.UploadArgs{Discard: name}, nil); !errors.Is(err, errcode.ErrPermissionDenied) {
			t.Errorf("discard %q: %v, want permission_denied", name, err)
		}
	}
	var open commands.TransferOpened
	if err := request(t, nc, subj("upload"), commands.UploadArgs{}, &open); err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, commands.TransferChunkBytes+1)
	if err := request(t, nc, open.Subject, commands.UploadChunk{Data: huge}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("a chunk over %d bytes: %v, want invalid_request", commands.TransferChunkBytes, err)
	}
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: -1}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("a negative offset: %v, want invalid_request", err)
	}
	if err := request(t, nc, subj("download"), commands.DownloadArgs{}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("a download naming nothing: %v, want invalid_request", err)
	}
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: 5, Data: []byte("x")}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("chunk out of order: %v, want invalid_request", err)
	}
	var p commands.UploadProgress
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: 0, Data: []byte("abc")}, &p); err != nil || p.Received != 3 {
		t.Fatalf("first chunk: %+v, %v", p, err)
	}
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: 0, Data: []byte("abc")}, &p); err != nil || p.Received != 3 {
		t.Fatalf("a retried chunk: %+v, %v; want it acknowledged, not written twice", p, err)
	}
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: 3, Last: true}, &p); err != nil || p.Upload == "" || p.Received != 3 {
		t.Fatalf("last chunk: %+v, %v", p, err)
	}
	if err := request(t, nc, open.Subject, commands.UploadChunk{Offset: 3}, nil); err == nil {
		t.Fatal("a chunk after the last was taken")
	}
	if err := request(t, nc, subj("upload"), commands.UploadArgs{Discard: p.Upload}, nil); err != nil {
		t.Fatalf("discard own upload: %v", err)
	}

	// Eight open at once is the tenant's limit.
	for i := range 8 {
		if err := request(t, nc, subj("upload"), commands.UploadArgs{}, &open); err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
	}
	if err := request(t, nc, subj("upload"), commands.UploadArgs{}, nil); !errors.Is(err, errcode.ErrQuotaExceeded) {
		t.Fatalf("ninth open upload: %v, want quota_exceeded", err)
	}
}

// TestIdleTransferAborted: a transfer that hears nothing for Idle is
// aborted, and its subject answers no more.
func TestIdleTransferAborted(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, Tenant: "acme", NoNode: true, Transfer: transfer.Config{Idle: 50 * time.Millisecond}})
	var open commands.TransferOpened
	if err := request(t, st.ClientConn, "sbx.cmd.acme.upload", commands.UploadArgs{}, &open); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := st.Transfers.Open(); n != 0 {
			return fmt.Errorf("%d open", n)
		}
		return nil
	})
	if err := request(t, st.ClientConn, open.Subject, commands.UploadChunk{Data: []byte("late")}, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("chunk to an aborted transfer: %v, want no responders", err)
	}
}

// TestUploadQuota: an upload that does not fit the workspace bucket's
// quota is refused with storage_quota_exceeded, the error a client can act
// on, not a retryable unavailable.
func TestUploadQuota(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Broker: broker.Config{MaxStore: 32 << 20, SyncInterval: time.Second}})
	ctx := testenv.Context(t, time.Minute)
	if _, err := objectstore.Ensure(ctx, st.JS, objectstore.Config{MaxBytes: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	_, err = st.Client.WriteFile(ctx, s.SessionID, "big.bin", big, 0o644)
	if !errors.Is(err, errcode.ErrStorageQuotaExceeded) {
		t.Fatalf("a 3 MiB write into a 2 MiB bucket: %v, want storage_quota_exceeded", err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "small.bin", big[:1<<20], 0o644); err != nil {
		t.Fatalf("a 1 MiB write after the refused one: %v", err)
	}
}
