package scheduler_test

import (
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/testenv"
)

// TestDeleteFailedCreate: a session whose create failed on a node that is
// up (no node serves it) is deleted by the engine on the client's delete,
// recorded as a delete; a second delete finds it gone.
func TestDeleteFailedCreate(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	// The local runtime cannot switch users: the create is recorded, failed.
	if _, err := st.Client.Create(ctx, commands.CreateArgs{SessionID: "s-failed", User: "1000"}); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("create as another user on the local runtime: %v, want invalid_request", err)
	}
	evs, err := st.Log.Session(ctx, "default", "s-failed")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := projection.Fold(evs); s.Status != projection.StatusFailed {
		t.Fatalf("after the failed create: %s, want failed", s.Status)
	}
	if err := st.Client.Delete(ctx, "s-failed"); err != nil {
		t.Fatalf("delete of a failed session: %v", err)
	}
	evs, err = st.Log.Session(ctx, "default", "s-failed")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := projection.Fold(evs); s.Status != projection.StatusDeleted {
		t.Fatalf("after delete: %s, want deleted", s.Status)
	}
	if err := st.Client.Delete(ctx, "s-failed"); errcode.Of(err) != errcode.SessionNotFound {
		t.Fatalf("second delete: %v, want session_not_found", err)
	}
}
