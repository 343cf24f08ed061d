package nodes_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestCordonTakesVersionedRequest: cordon and uncordon take a versioned
// request only (anything else is invalid_request and changes nothing),
// record the actor it names in the node event, and a valid cordon body
// that JetStream delivers onto the subject changes nothing.
func TestCordonTakesVersionedRequest(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	node := st.Agent.ID()
	subj := commands.Subjects{}
	request := func(op, body string) (nodes.Info, *commands.WireError) {
		t.Helper()
		m, err := st.ClientConn.RequestWithContext(ctx, subj.Node(node, op), []byte(body))
		if err != nil {
			t.Fatalf("%s %s: %v", op, body, err)
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		var info nodes.Info
		if rep.Error == nil {
			if err := json.Unmarshal(rep.Result, &info); err != nil {
				t.Fatal(err)
			}
		}
		return info, rep.Error
	}
	v := commands.Version
	for _, body := range []string{``, `{}`, `{"version":""}`, `{"version":"` + v + `","bogus":1}`, `{"version":"1.99","bogus":1}`, `{"version":"1.99"}`, `{"version":"` + v + `","args":{"node":"x"}}`, `[1]`} {
		if _, werr := request(commands.NodeCordon, body); werr == nil || werr.Code != errcode.InvalidRequest {
			t.Fatalf("cordon %q: %+v, want invalid_request", body, werr)
		}
	}
	info, werr := request(commands.NodeCordon, `{"version":"`+v+`","actor":"ops"}`)
	if werr != nil || !info.Cordoned {
		t.Fatalf("cordon: %+v %+v", info, werr)
	}

	// A valid uncordon body in the stream, pushed onto the uncordon subject.
	arrived := make(chan struct{}, 16)
	watch, err := st.ClientConn.Subscribe(subj.Node(node, commands.NodeUncordon), func(*nats.Msg) { arrived <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()
	if _, err := st.JS.Publish(ctx, "sbx.evt.x.forged.exec.start", []byte(`{"version":"`+v+`","actor":"forger"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.JS.CreateOrUpdateConsumer(ctx, events.DefaultStream, jetstream.ConsumerConfig{
		Name: "push", DeliverSubject: subj.Node(node, commands.NodeUncordon), FilterSubject: "sbx.evt.x.forged.>",
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("nothing was delivered onto the uncordon subject")
	}
	// The uncordon subject's own order is the barrier: once a request
	// sent after the delivery is answered, the delivery was handled.
	if _, werr := request(commands.NodeUncordon, `{}`); werr == nil {
		t.Fatal("an uncordon without version was taken")
	}
	info, werr = request(commands.NodeUncordon, `{"version":"`+v+`","actor":"ops2"}`)
	if werr != nil || info.Cordoned {
		t.Fatalf("uncordon: %+v %+v", info, werr)
	}
	var kinds []string
	err = st.Log.Read(ctx, events.ReadOptions{Filters: []string{"sbx.nodeevt." + node + ".*"}}, func(m events.Msg) error {
		ev, err := events.ParseNode(m.Data)
		if err != nil {
			return err
		}
		if ev.Kind == "cordoned" || ev.Kind == "uncordoned" {
			kinds = append(kinds, ev.Kind+" by "+ev.Actor)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(kinds); got != "[cordoned by ops uncordoned by ops2]" {
		t.Fatalf("node events %s, want the one cordon by ops and the one uncordon by ops2", got)
	}
}
