package broker

import (
	"errors"
	"fmt"
	"net"
	"sync"
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
	return nil
}

// Broker is a running embedded nats-server.
type Broker struct {
	ns   *server.Server
	once sync.Once
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
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	} else {
		opts.SyncAlways = true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	go ns.Start() // owned by the Broker: Shutdown stops it and waits.
	if !ns.ReadyForConnections(cfg.StartTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("broker: not ready within %s (is %s already in use?)", cfg.StartTimeout, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)))
	}
	return &Broker{ns: ns}, nil
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

// Server returns the embedded server, for tests and diagnostics.
func (b *Broker) Server() *server.Server { return b.ns }

// Shutdown stops the server and waits for it. It is safe to call twice.
func (b *Broker) Shutdown() {
	b.once.Do(func() {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	})
}
