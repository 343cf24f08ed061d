package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

func TestDefaults(t *testing.T) {
	d := storage.Defaults(100 << 30)
	if d.Events != 25<<30 || d.Objects != 60<<30 || d.KV != 2<<30 {
		t.Fatalf("storage.Defaults(100 GiB) = %+v, want 25, 60 and 2 GiB", d)
	}
	if total := d.Events + d.Objects + 3*d.KV; total > 100<<30 {
		t.Fatalf("the defaults reserve %d bytes of a %d-byte store", total, int64(100<<30))
	}
	if storage.Defaults(0) != (storage.Limits{}) || storage.Defaults(-1) != (storage.Limits{}) {
		t.Fatal("an unknown store gives limits")
	}
}

// TestDecide: the limit given to an existing stream when the operator set
// none.
func TestDecide(t *testing.T) {
	const def = 1000
	for _, tc := range []struct {
		name  string
		u     storage.Usage
		want  int64
		noted bool
	}{
		{"has a limit: kept", storage.Usage{Stream: "S", Bytes: 10, MaxBytes: 50}, 0, false},
		{"has a limit below what it holds: kept", storage.Usage{Stream: "S", Bytes: 900, MaxBytes: 500}, 0, false},
		{"no limit, holds less: the default", storage.Usage{Stream: "S", Bytes: 999}, def, false},
		{"no limit, empty: the default", storage.Usage{Stream: "S"}, def, false},
		{"no limit, holds the default: none, said", storage.Usage{Stream: "S", Bytes: def}, 0, true},
		{"no limit, holds more: none, said", storage.Usage{Stream: "S", Bytes: 5000}, 0, true},
	} {
		got, note := storage.Decide(tc.u, def)
		if got != tc.want || (note != "") != tc.noted || (tc.noted && !strings.Contains(note, "S holds")) {
			t.Errorf("%s: decide = %d, %q; want %d, noted %v", tc.name, got, note, tc.want, tc.noted)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		u       storage.Usage
		percent float64
		warn    bool
	}{
		{storage.Usage{Bytes: 79, MaxBytes: 100}, 79, false},
		{storage.Usage{Bytes: 80, MaxBytes: 100}, 80, true},
		{storage.Usage{Bytes: 150, MaxBytes: 100}, 150, true},
		{storage.Usage{Bytes: 1 << 40}, 0, false},
	} {
		if tc.u.Percent() != tc.percent || tc.u.Warn() != tc.warn {
			t.Errorf("%+v: %.1f%%, warn %v; want %.1f%%, %v", tc.u, tc.u.Percent(), tc.u.Warn(), tc.percent, tc.warn)
		}
	}
}

// streamAt makes a discard-new stream of 100 KiB holding pct percent of it.
func streamAt(ctx context.Context, t *testing.T, js jetstream.JetStream, name string, pct int) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxBytes: 100 << 10, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Bytes >= uint64(pct)*1024 {
			return s
		}
		if _, err := js.Publish(ctx, name+".x", make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMonitorLooks: a stream at 80% of its limit is warned about once per
// Repeat, a stream below it never, a missing one is skipped, and the
// stream's return below the level is noted once.
func TestMonitorLooks(t *testing.T) {
	b := testenv.StartBrokerWith(t, broker.Config{SyncInterval: time.Second})
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	full := streamAt(ctx, t, js, "FULL", 85)
	streamAt(ctx, t, js, "LOW", 10)
	var logs testenv.SyncBuffer
	m, err := storage.NewMonitor(js, storage.MonitorConfig{Streams: []string{"FULL", "LOW", "MISSING"}, Repeat: time.Hour}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	count := func(s string) int { return strings.Count(logs.String(), s) }
	t0 := time.Now()
	m.Look(ctx, t0)
	m.Look(ctx, t0.Add(time.Minute))
	if n := count("stream nearly full"); n != 1 || !strings.Contains(logs.String(), "stream=FULL") || strings.Contains(logs.String(), "LOW") || strings.Contains(logs.String(), "MISSING") {
		t.Fatalf("after two looks a minute apart, %d warnings:\n%s\nwant one, about FULL", n, logs.String())
	}
	m.Look(ctx, t0.Add(time.Hour))
	if n := count("stream nearly full"); n != 2 {
		t.Fatalf("an hour later, %d warnings, want 2:\n%s", n, logs.String())
	}
	if err := full.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	m.Look(ctx, t0.Add(2*time.Hour))
	m.Look(ctx, t0.Add(3*time.Hour))
	if n := count("below the warning level again"); n != 1 || count("stream nearly full") != 2 {
		t.Fatalf("after the purge:\n%s\nwant one note that FULL is below again, and no more warnings", logs.String())
	}
}

// TestMonitorRuns: the monitor's goroutine looks at once and on its
// interval, and Close stops it (twice is fine).
func TestMonitorRuns(t *testing.T) {
	b := testenv.StartBrokerWith(t, broker.Config{SyncInterval: time.Second})
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	streamAt(ctx, t, js, "FULL", 90)
	var logs testenv.SyncBuffer
	m, err := storage.NewMonitor(js, storage.MonitorConfig{Streams: []string{"FULL"}, Interval: 10 * time.Millisecond, Repeat: 10 * time.Millisecond}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := strings.Count(logs.String(), "stream nearly full"); n < 2 {
			return fmt.Errorf("%d warnings so far", n)
		}
		return nil
	})
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.NewMonitor(js, storage.MonitorConfig{}, nil); err == nil {
		t.Fatal("a monitor of no streams was accepted")
	}
}

// TestResolve: the limit a stream gets when it is ensured, against real
// streams: the operator's always; else a new stream's or a small
// unbounded one's default; an existing limit kept; an unbounded stream
// that holds the default or more left unbounded, with a note.
func TestResolve(t *testing.T) {
	b := testenv.StartBrokerWith(t, broker.Config{SyncInterval: time.Second})
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	mk := func(name string, maxBytes int64, fill int) {
		t.Helper()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, MaxBytes: maxBytes}); err != nil {
			t.Fatal(err)
		}
		for range fill {
			if _, err := js.Publish(ctx, name, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("BOUNDED", 50_000, 1)
	mk("SMALL", 0, 1)
	mk("LARGE", 0, 20)
	for _, tc := range []struct {
		stream     string
		asked, def int64
		want       int64
		noted      bool
	}{
		{"NEW", 0, 10_000, 10_000, false},
		{"NEW", 7, 10_000, 7, false},
		{"BOUNDED", 0, 10_000, 0, false},
		{"BOUNDED", 99_000, 10_000, 99_000, false},
		{"SMALL", 0, 10_000, 10_000, false},
		{"LARGE", 0, 10_000, 0, true},
		{"LARGE", 0, 0, 0, false},
	} {
		got, note, err := storage.Resolve(ctx, js, tc.stream, tc.asked, tc.def)
		if err != nil || got != tc.want || (note != "") != tc.noted {
			t.Errorf("Resolve(%s, asked %d, default %d) = %d, %q, %v; want %d, noted %v", tc.stream, tc.asked, tc.def, got, note, err, tc.want, tc.noted)
		}
	}
}

// TestMonitorList: a monitor with a List watches the streams it names at
// each look (as an engine's watches every events partition), and falls
// back to Streams when the list fails.
func TestMonitorList(t *testing.T) {
	b := testenv.StartBrokerWith(t, broker.Config{SyncInterval: time.Second})
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	streamAt(ctx, t, js, "FULL_1", 85)
	streamAt(ctx, t, js, "FULL_2", 85)
	var logs testenv.SyncBuffer
	var fail atomic.Bool
	list := func(context.Context) ([]string, error) {
		if fail.Load() {
			return nil, errors.New("the events stream is away")
		}
		return []string{"FULL_1"}, nil
	}
	m, err := storage.NewMonitor(js, storage.MonitorConfig{Streams: []string{"FULL_2"}, List: list, Repeat: time.Hour}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m.Look(ctx, time.Now())
	if s := logs.String(); !strings.Contains(s, "stream=FULL_1") || strings.Contains(s, "FULL_2") {
		t.Fatalf("a look with a list:\n%s\nwant a warning about FULL_1 alone", s)
	}
	fail.Store(true)
	m.Look(ctx, time.Now())
	if s := logs.String(); !strings.Contains(s, "stream=FULL_2") {
		t.Fatalf("a look whose list failed:\n%s\nwant a warning about FULL_2, the fallback", s)
	}
	if _, err := storage.NewMonitor(js, storage.MonitorConfig{List: list}, nil); err != nil {
		t.Fatalf("a monitor with a list and no streams: %v", err)
	}
}
