package nodes_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSessionLifetime: the operator bounds what lifetime a create may ask
// (policy_denied past it) and gives one to creates that ask none; a
// session past its lifetime is shut down by the node, recorded with
// reason max_lifetime, and cannot be started or resumed again.
func TestSessionLifetime(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{
		ExpiryInterval: 20 * time.Millisecond,
		Policy:         nodes.Policy{DefaultLifetime: time.Hour, MaxLifetime: 2 * time.Hour},
	}})
	ctx := testenv.Context(t, time.Minute)

	_, err := st.Client.Create(ctx, commands.CreateArgs{LifetimeS: 3 * 3600})
	if !errors.Is(err, errcode.ErrPolicyDenied) {
		t.Fatalf("create asking 3h under a 2h maximum: %v, want policy_denied", err)
	}
	_, err = st.Client.Create(ctx, commands.CreateArgs{LifetimeS: -1})
	if !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("negative lifetime: %v, want invalid_request", err)
	}

	def, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Log.Session(ctx, "default", def.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := events.DecodeData[events.CreateStart](evs[0])
	if err != nil || cs.ExpiresAt == nil || time.Until(*cs.ExpiresAt) < 59*time.Minute {
		t.Fatalf("create start records expires_at %v (%v), want the default hour from now", cs.ExpiresAt, err)
	}

	short, err := st.Client.Create(ctx, commands.CreateArgs{LifetimeS: 1})
	if err != nil {
		t.Fatal(err)
	}
	var last events.Event
	testenv.Eventually(t, 10*time.Second, func() error {
		evs, err := st.Log.Session(ctx, "default", short.SessionID)
		if err != nil {
			return err
		}
		last = evs[len(evs)-1]
		if last.Op != string(commands.OpShutdown) || last.Phase != events.PhaseFinish {
			return fmt.Errorf("last event %s %s", last.Op, last.Phase)
		}
		return nil
	})
	fin, err := events.DecodeData[events.StatusFinish](last)
	if err != nil || fin.Reason != nodes.ReasonMaxLifetime || last.Actor != "node:node-1" || last.OK == nil || !*last.OK {
		t.Fatalf("lifetime shutdown recorded as %+v by %q (%v), want ok with reason %s by the node", fin, last.Actor, err, nodes.ReasonMaxLifetime)
	}
	if err := st.Client.Start(ctx, short.SessionID); !errors.Is(err, errcode.ErrInvalidState) {
		t.Fatalf("start after the lifetime: %v, want invalid_state (the session is shut down)", err)
	}
	if _, err := st.Client.Resume(ctx, short.SessionID, nil); !errors.Is(err, errcode.ErrPolicyDenied) {
		t.Fatalf("resume after the lifetime: %v, want policy_denied", err)
	}
	if err := st.Client.Delete(ctx, short.SessionID); err != nil {
		t.Fatalf("delete after the lifetime: %v", err)
	}
	if ok, err := st.Client.Running(ctx, def.SessionID); err != nil || !ok {
		t.Fatalf("the session with an hour left: running %v, %v", ok, err)
	}
}
