package nodes_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/testenv"
)

// TestNodePermissionsSuffice: a node with its own credentials (only the
// JetStream API auth gives a node) runs a session's whole life through
// the object store: a large write, a persist, a stop, a shutdown, a resume
// that restores the snapshot into a new sandbox, and a delete.
func TestNodePermissionsSuffice(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Auth: true, Tenant: "acme"})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client
	res, err := c.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.SessionID
	big := bytes.Repeat([]byte("paddock "), (commands.InlineLimit+1)/8+1)
	if _, err := c.WriteFile(ctx, id, "big.txt", big, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Persist(ctx, id); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if err := c.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := c.Shutdown(ctx, id); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := c.Resume(ctx, id, nil); err != nil {
		t.Fatalf("resume: %v", err)
	}
	got, err := c.ReadFile(ctx, id, "big.txt")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read after resume: %d bytes, %v; want the %d written", len(got), err, len(big))
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
}
