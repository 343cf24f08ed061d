package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures the embedded server.
type Config struct {
	// StoreDir holds JetStream's files; required.
	StoreDir string
	// Host and Port are the client listener (default 127.0.0.1:4222;
	// Port -1 picks a free port).
	Host string
	Port int
	// SyncInterval relaxes durability: 0 syncs every write before the ack;
	// a positive interval fsyncs periodically instead.
	SyncInterval time.Duration
	// ServerName names the server (default "paddock").
	ServerName string
	// StartTimeout bounds the wait for the server to accept connections
	// (default 10s).
	StartTimeout time.Duration
	// AccountsFile is a nats-server config fragment with the accounts and
	// users to authenticate (auth.Store's accounts.conf). Empty: no auth,
	// which only a loopback listener may go without (the caller decides).
	AccountsFile string
	// TLSCert and TLSKey, when set, make the client listener TLS-only.
	TLSCert, TLSKey string
	// Cluster, when set, makes the server one of a NATS cluster.
	Cluster *Cluster
	// MaxStore caps the bytes JetStream stores on this server
	// (max_file_store). 0 leaves nats-server's default: 75% of the disk
	// space free at start, plus what the store already holds.
	MaxStore int64
	// Logger receives the server's log (component=nats-server) and the
	// broker's own; nil logs nothing. Debug and Trace turn on the
	// server's debug and protocol trace lines (at DEBUG).
	Logger       *slog.Logger
	Debug, Trace bool
	// HealInterval is how often the broker checks whether JetStream needs
	// a restart after its store ran out of space (default 2s), and
	// HealFree the free bytes its filesystem needs before it does
	// (default 16 MiB). See heal.go.
	HealInterval time.Duration
	HealFree     int64
}

// Cluster is a server's place in a NATS cluster: its route listener and
// the routes to the others (nats-route://host:port). Every server of a
// JetStream cluster needs its own ServerName.
type Cluster struct {
	Name string
	// Host and Port are the route listener (Port -1: a free port).
	Host   string
	Port   int
	Routes []string
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.StoreDir == "" {
		return errors.New("broker: store dir is required")
	}
	if c.Port < -1 || c.Port > 65535 {
		return fmt.Errorf("broker: port %d outside -1..65535", c.Port)
	}
	if c.SyncInterval < 0 {
		return errors.New("broker: negative sync interval")
	}
	if c.MaxStore < 0 {
		return errors.New("broker: negative max store")
	}
	if c.HealInterval < 0 || c.HealFree < 0 {
		return errors.New("broker: negative heal interval or heal free space")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("broker: TLS needs both a certificate and a key")
	}
	return nil
}

// Broker is a running embedded nats-server.
type Broker struct {
	ns     *server.Server
	cfg    Config
	logger *slog.Logger
	// jsConfig is JetStream's config as Start gave it, for a restart;
	// jsOn says whether Start found JetStream on (only then is a
	// JetStream that is off one to heal).
	jsConfig server.JetStreamConfig
	jsOn     bool

	// mu serialises Reload, a JetStream restart and Shutdown.
	mu sync.Mutex
	// cur is the options the server runs with (it keeps the pointer it was
	// given); mu guards it.
	cur *server.Options
	// closing is set by Shutdown; mu guards it.
	closing bool

	// outOfSpace is set by the server's logger on an out-of-space error
	// and cleared by a JetStream restart.
	outOfSpace atomic.Bool
	heals      atomic.Int64
	stopHeal   context.CancelFunc
	healDone   sync.WaitGroup
	once       sync.Once
}

// Start starts the server and waits until it accepts connections. It fails
// if the listener cannot be bound or the server does not get ready in time.
func Start(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "paddock"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if cfg.HealInterval == 0 {
		cfg.HealInterval = 2 * time.Second
	}
	if cfg.HealFree == 0 {
		cfg.HealFree = 16 << 20
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	b := &Broker{ns: ns, cfg: cfg, cur: opts, logger: logger}
	if cfg.Logger != nil {
		ns.SetLoggerV2(&serverLog{l: logger.With("server", cfg.ServerName), outOfSpace: b.noteOutOfSpace}, cfg.Debug, cfg.Trace, false)
	} else {
		ns.SetLoggerV2(&serverLog{l: logger, outOfSpace: b.noteOutOfSpace}, false, false, false)
	}
	go ns.Start() // owned by the Broker: Shutdown stops it and waits.
	if !ns.ReadyForConnections(cfg.StartTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("broker: not ready within %s (is %s already in use?)", cfg.StartTimeout, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)))
	}
	if jc := ns.JetStreamConfig(); jc != nil {
		b.jsConfig, b.jsOn = *jc, true
		// EnableJetStream adds the "jetstream" directory itself.
		b.jsConfig.StoreDir = cfg.StoreDir
	}
	// The healer lives until Shutdown, which cancels it and waits.
	ctx, cancel := context.WithCancel(context.Background())
	b.stopHeal = cancel
	b.healDone.Add(1)
	go func() {
		defer b.healDone.Done()
		b.heal(ctx)
	}()
	return b, nil
}

// noteOutOfSpace is the server logger's report of an out-of-space write
// error: JetStream restarts once space is back (heal.go).
func (b *Broker) noteOutOfSpace(err error) {
	if !b.outOfSpace.Swap(true) {
		b.logger.Error("broker: JetStream's store is out of space: writes fail until space is freed, then JetStream restarts by itself", "store_dir", b.cfg.StoreDir, "err", err)
	}
}

// options builds the server's options from cfg (defaults applied): the
// accounts file first, then what cfg fixes over it.
func (cfg Config) options() (*server.Options, error) {
	opts := &server.Options{}
	if cfg.AccountsFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.AccountsFile); err != nil {
			return nil, fmt.Errorf("broker: accounts: %w", err)
		}
	}
	opts.ServerName = cfg.ServerName
	opts.Host, opts.Port = cfg.Host, cfg.Port
	opts.JetStream, opts.StoreDir = true, cfg.StoreDir
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	// The broker's logger, not nats-server's own, writes the log
	// (SetLoggerV2 in Start).
	opts.NoSigs = true
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	} else {
		opts.SyncAlways = true
	}
	if c := cfg.Cluster; c != nil {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		if len(c.Routes) > 0 {
			opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		}
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("broker: TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 2
	}
	return opts, nil
}

// Reload re-reads the accounts file and applies it to the running server:
// new identities can connect, removed ones are disconnected.
//
// nats-server (2.15.3 too) reads its options without a lock while it
// answers a direct get, so the race detector flags a reload that meets a
// KV or stream direct get; the read is of one pointer and harmless, but
// tests add their identities before the broker starts (see
// testenv.StackOptions.OtherTenants) rather than reloading mid-test.
func (b *Broker) Reload() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A reload that creates an account does not start the subscriptions of
	// its service imports (nats-server configures those only for accounts
	// that existed before the reload); a second reload, where the account
	// exists, does. docs/security.md says the same for external servers.
	for range 2 {
		opts, err := b.cfg.options()
		if err != nil {
			return err
		}
		// The port the server picked stays (cfg may say -1).
		opts.Port = b.ns.Addr().(*net.TCPAddr).Port
		b.keepAccounts(opts)
		if err := b.ns.ReloadOptions(opts); err != nil {
			return fmt.Errorf("broker: reload: %w", err)
		}
		b.cur = opts
	}
	return nil
}

// keepAccounts points each nkey user of opts that the running options
// know, in the same account, at the account object those options hold.
// The server compares old and new options with reflect.DeepEqual, and an
// account object of the running options reaches live server state through
// its service imports: walking it races with the server's own updates.
// Pointer-equal accounts end the walk there.
func (b *Broker) keepAccounts(opts *server.Options) {
	old := map[string]*server.Account{}
	for _, u := range b.cur.Nkeys {
		if u.Account != nil {
			old[u.Nkey] = u.Account
		}
	}
	for _, u := range opts.Nkeys {
		if a, ok := old[u.Nkey]; ok && u.Account != nil && a.Name == u.Account.Name {
			u.Account = a
		}
	}
}

// ClientURL is the URL other processes connect to.
func (b *Broker) ClientURL() string { return b.ns.ClientURL() }

// Connect returns an in-process connection to the server.
func (b *Broker) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(b.ns), nats.Name("paddock-engine")}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect in-process: %w", err)
	}
	return nc, nil
}

// MaxStore returns the bytes JetStream may store on this server: the
// configured MaxStore, or the limit nats-server derived from the disk.
func (b *Broker) MaxStore() int64 {
	if c := b.ns.JetStreamConfig(); c != nil {
		return c.MaxStore
	}
	return 0
}

// Server returns the embedded server, for tests and diagnostics.
func (b *Broker) Server() *server.Server { return b.ns }

// Shutdown stops the server and waits for it. It is safe to call twice.
func (b *Broker) Shutdown() {
	b.once.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		b.stopHeal()
		b.healDone.Wait()
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	})
}
