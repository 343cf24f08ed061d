package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv/wait"
	"github.com/paddock-dev/paddock/transfer"
)

// StartBroker starts an embedded server with JetStream in a temporary
// directory on a free 127.0.0.1 port, syncing every write (the engine's
// default). It is shut down when the test ends.
func StartBroker(t testing.TB) *broker.Broker {
	t.Helper()
	return StartBrokerWith(t, broker.Config{})
}

// StartBrokerWith is StartBroker with cfg's settings; StoreDir, Host and
// Port are always a temporary directory and a free 127.0.0.1 port.
func StartBrokerWith(t testing.TB, cfg broker.Config) *broker.Broker {
	t.Helper()
	cfg.StoreDir, cfg.Host, cfg.Port = t.TempDir(), "127.0.0.1", -1
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Shutdown)
	return b
}

// Connect opens a TCP connection to url, closed when the test ends. It
// authenticates with the credentials file PADDOCK_CREDS names, if any (a
// test sets it to the admin credentials of the engine it started; "none"
// means none, as for the CLI).
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Name("paddock-test")}
	if p := os.Getenv("PADDOCK_CREDS"); p != "" && p != "none" {
		creds, err := auth.LoadCreds(p)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, creds.Options()...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on nc.
func JetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Context returns a context that ends when the test does, bounded by d.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 10ms until it returns nil, and fails the
// test with cond's last error if that does not happen within timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	wait.Eventually(t, timeout, cond)
}

// StackOptions adjusts StartStack.
type StackOptions struct {
	// Node configures the node agent (ID defaults to "node-1").
	Node nodes.Config
	// Runtimes replace the default local runtime.
	Runtimes []runtime.Runtime
	// Tenant of the client (default "default").
	Tenant string
	// NoNode starts no node agent (the test brings its own).
	NoNode bool
	// Broker configures the embedded server (durability); its address and
	// store directory are always the test's own.
	Broker broker.Config
	// Scheduler configures the scheduler.
	Scheduler scheduler.Config
	// Transfer configures the transfer service.
	Transfer transfer.Config
	// Auth runs the stack as engine serve does by default: an auth store
	// (in Stack.Auth) with the engine, the node and a client of Tenant,
	// each connected with its own credentials, the node signing with its
	// issued key.
	Auth bool
	// OtherTenants adds, with Auth, a client identity per tenant, named as
	// the tenant, before the broker starts. A test then needs no reload
	// while the stack runs: nats-server reads its options unlocked while it
	// answers a direct get, so a reload at that instant is a data race.
	OtherTenants []string
}

// Stack is a whole Paddock on one embedded server.
type Stack struct {
	Broker    *broker.Broker
	Engine    *nats.Conn // the engine's in-process connection
	JS        jetstream.JetStream
	Log       *events.Log
	Scheduler *scheduler.Scheduler
	// Transfers is the engine's file transfer service.
	Transfers *transfer.Service
	Agent     *nodes.Agent
	Local     *local.Runtime
	// ClientConn is a TCP connection, as a fleet process would have.
	ClientConn *nats.Conn
	Client     *client.Client
	// Auth is the auth store of a stack started with StackOptions.Auth.
	Auth *auth.Store
}

// StartStack starts a broker, the events stream and workspace bucket, a
// scheduler, one node agent and a client, and stops them all when the test
// ends.
func StartStack(t testing.TB, opts StackOptions) *Stack {
	t.Helper()
	ctx := Context(t, 30*time.Second)
	if opts.Tenant == "" {
		opts.Tenant = "default"
	}
	if opts.Node.ID == "" {
		opts.Node.ID = "node-1"
	}
	st := &Stack{}
	var engineOpts []nats.Option
	if opts.Auth {
		st.Auth = auth.Open(t.TempDir())
		ids := [][3]string{{"engine", "engine", ""}, {opts.Node.ID, "node", ""}, {"client", "client", opts.Tenant}}
		for _, tenant := range opts.OtherTenants {
			ids = append(ids, [3]string{tenant, "client", tenant})
		}
		for _, id := range ids {
			if _, err := st.Auth.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
				t.Fatal(err)
			}
		}
		opts.Broker.AccountsFile = st.Auth.ConfigPath()
		engineOpts = st.credsOptions(t, "engine")
	}
	st.Broker = StartBrokerWith(t, opts.Broker)
	nc, err := st.Broker.Connect(engineOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st.Engine = nc
	st.JS = JetStream(t, nc)
	if _, err := events.EnsureStream(ctx, st.JS, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := objectstore.Ensure(ctx, st.JS, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	st.Log = events.NewLog(st.JS, "", "")
	st.Scheduler, err = scheduler.New(nc, st.Log, opts.Scheduler, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Scheduler.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Scheduler.Close)
	store, err := objectstore.Open(ctx, st.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	st.Transfers = transfer.New(nc, store, opts.Transfer, nil)
	if err := st.Transfers.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Transfers.Close)

	if opts.Auth {
		st.ClientConn = ConnectAs(t, st.Broker.ClientURL(), st.Auth.CredsPath("client")).Conn
	} else {
		st.ClientConn = Connect(t, st.Broker.ClientURL())
	}
	st.Client, err = client.New(st.ClientConn, client.Options{Tenant: opts.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	if opts.NoNode {
		return st
	}
	rts := opts.Runtimes
	if len(rts) == 0 {
		st.Local, err = local.New(local.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		rts = []runtime.Runtime{st.Local}
	}
	cfg := opts.Node
	if opts.Auth {
		creds, err := auth.LoadCreds(st.Auth.CredsPath(cfg.ID))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Signer, err = creds.KeyPair(); err != nil {
			t.Fatal(err)
		}
		st.Agent = startAgentOn(t, ConnectAs(t, st.Broker.ClientURL(), st.Auth.CredsPath(cfg.ID)).Conn, cfg, rts...)
	} else {
		// The node connects over TCP like a separate agent-node process would.
		st.Agent = StartAgent(t, st.Broker.ClientURL(), cfg, rts...)
	}
	Eventually(t, 10*time.Second, func() error {
		if len(st.Scheduler.Nodes()) == 0 {
			return fmt.Errorf("scheduler knows no node yet")
		}
		return nil
	})
	return st
}

// credsOptions returns the connect options of a stack identity.
func (st *Stack) credsOptions(t testing.TB, name string) []nats.Option {
	t.Helper()
	creds, err := auth.LoadCreds(st.Auth.CredsPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return creds.Options()
}

// StartAgent starts a node agent with rts (a local runtime in a temporary
// directory when none is given) on its own TCP connection to url, as a
// separate agent-node process would run, and closes it when the test ends.
func StartAgent(t testing.TB, url string, cfg nodes.Config, rts ...runtime.Runtime) *nodes.Agent {
	t.Helper()
	return startAgentOn(t, Connect(t, url), cfg, rts...)
}

// startAgentOn is StartAgent on a given connection.
func startAgentOn(t testing.TB, nc *nats.Conn, cfg nodes.Config, rts ...runtime.Runtime) *nodes.Agent {
	t.Helper()
	if len(rts) == 0 {
		rt, err := local.New(local.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		rts = []runtime.Runtime{rt}
	}
	a, err := nodes.New(nc, events.NewLog(JetStream(t, nc), "", ""), cfg, nil, rts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The test's context is done when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close agent %s: %v", cfg.ID, err)
		}
	})
	return a
}

// StartProjector starts the engine's projector on js (default config) and
// closes it when the test ends.
func StartProjector(t testing.TB, js jetstream.JetStream) *projector.Projector {
	t.Helper()
	p, err := projector.New(js, projector.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}
