package broker_test

import (
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/testenv"
)

// TestWatchConfig: an identity added to the auth store after the server
// started can connect once the watch has reloaded the config; after stop,
// nothing more is reloaded and stop may not hang.
func TestWatchConfig(t *testing.T) {
	st := auth.Open(t.TempDir())
	if _, err := st.Add("engine", auth.RoleEngine, ""); err != nil {
		t.Fatal(err)
	}
	b := testenv.StartAuthBroker(t, st)
	stop := b.WatchConfig(st.ConfigPath(), slog.New(slog.DiscardHandler))
	if _, err := st.Add("late", auth.RoleAdmin, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		c, err := testenv.DialAs(b.ClientURL(), st.CredsPath("late"))
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	stop()
}

// TestListenerPorts: the client port is among the ports the server
// listens on.
func TestListenerPorts(t *testing.T) {
	b := testenv.StartBroker(t)
	port := b.Server().Addr().(*net.TCPAddr).Port
	if ports := b.ListenerPorts(); !slices.Contains(ports, port) {
		t.Fatalf("got ports %v, want the client port %d among them", ports, port)
	}
}
