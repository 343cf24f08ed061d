package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/paddock-dev/paddock/testenv"
)

// TestProgress: on a terminal the progress shows what it counts; the
// content passes through unchanged either way; on anything else (a pipe,
// a file: scripts and tests) nothing is printed.
func TestProgress(t *testing.T) {
	data := strings.Repeat("paddock ", 1<<16) // 512 KiB

	var quiet bytes.Buffer
	p := startProgress(&quiet, "write big.txt", true)
	var got bytes.Buffer
	if _, err := io.Copy(&got, p.Reader(strings.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	p.done()
	s := startProgress(&quiet, "persist", false)
	s.done()
	if quiet.Len() != 0 || got.String() != data {
		t.Fatalf("not a terminal: printed %q, content intact %v", quiet.String(), got.String() == data)
	}

	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	var shown testenv.SyncBuffer
	read := make(chan struct{})
	go func() { defer close(read); _, _ = io.Copy(&shown, master) }() // ends when master closes
	got.Reset()
	p = startProgress(tty, "write big.txt", true)
	if _, err := io.Copy(p.Writer(&got), strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	p.done()
	s = startProgress(tty, "persist", false)
	s.done()
	if got.String() != data {
		t.Fatal("the content changed on its way through the progress")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if out := shown.String(); !strings.Contains(out, "write big.txt") || !strings.Contains(out, "kB") {
			return fmt.Errorf("the terminal shows %q", out)
		}
		return nil
	})
	tty.Close()
	master.Close()
	<-read
}
