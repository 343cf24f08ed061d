package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestServerLog: nats-server's levels map onto slog's with
// component=nats-server, debug lines only when the handler takes them, and
// an out-of-space error value among the arguments (wrapped as the file
// store wraps it) is reported, while its text alone is not.
func TestServerLog(t *testing.T) {
	var buf bytes.Buffer
	var reported []error
	l := &serverLog{l: slog.New(slog.NewTextHandler(&buf, nil)), outOfSpace: func(err error) { reported = append(reported, err) }}
	l.Noticef("notice %d", 1)
	l.Warnf("warn %s", "x")
	l.Errorf("error %v", errors.New("plain"))
	l.Fatalf("fatal %v", "y")
	l.Debugf("debug")
	l.Tracef("trace")
	out := buf.String()
	for _, want := range []string{`level=INFO msg="notice 1" component=nats-server`, `level=WARN msg="warn x" component=nats-server`,
		`level=ERROR msg="error plain" component=nats-server`, `level=ERROR msg="fatal: fatal y" component=nats-server`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "debug") || strings.Contains(out, "trace") {
		t.Errorf("debug lines at INFO level:\n%s", out)
	}
	if len(reported) != 0 {
		t.Fatalf("reported %v for errors that are not out of space", reported)
	}
	enospc := fmt.Errorf("write block: %w", &fs.PathError{Op: "write", Path: "/s/1.blk", Err: syscall.ENOSPC})
	l.Errorf("Filestore [S] Critical write error: %v", enospc)
	l.Warnf("raft: %v", &fs.PathError{Op: "write", Path: "/r", Err: syscall.EDQUOT})
	l.Errorf("%s", "no space left on device")
	if len(reported) != 2 {
		t.Fatalf("reported %v, want the ENOSPC and the EDQUOT errors", reported)
	}

	buf.Reset()
	l = &serverLog{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Debugf("debug %d", 2)
	l.Tracef("<<- [PUB x]")
	l.Errorf("%v", enospc) // no reporter: logged only
	if out := buf.String(); !strings.Contains(out, `level=DEBUG msg="debug 2"`) || !strings.Contains(out, `msg="trace: <<- [PUB x]"`) {
		t.Errorf("debug and trace lines at DEBUG level:\n%s", out)
	}
}
