package consoleflags

import (
	"testing"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/errcode"
)

// TestCheck refuses console flags that do not go together or would serve
// tokens in clear beyond loopback.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--console-addr", "127.0.0.1:8480", "--console-tokens", "t.json"}, true},
		{[]string{"--console-addr", "0.0.0.0:8480", "--console-tokens", "t.json", "--console-allow-remote"}, true},
		{[]string{"--console-addr", "127.0.0.1:8480"}, false},
		{[]string{"--console-addr", "0.0.0.0:8480", "--console-tokens", "t.json"}, false},
		{[]string{"--console-tokens", "t.json"}, false},
		{[]string{"--console-allow-remote"}, false},
		{[]string{"--console-addr", "nonsense", "--console-tokens", "t.json"}, false},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		f := Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := f.Check()
		if (err == nil) != c.ok || (err != nil && errcode.Of(err) != errcode.InvalidRequest) {
			t.Errorf("%v: Check = %v; want ok %v (else invalid_request)", c.args, err, c.ok)
		}
	}
}
