package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestStreamFull: the events stream refuses, by default, the append past
// its reserved size with storage_quota_exceeded (naming the stream and the
// flag) and loses nothing; with DropOldest it drops its oldest events
// instead. Ensuring it again without a size keeps the size it has.
func TestStreamFull(t *testing.T) {
	for _, dropOldest := range []bool{false, true} {
		t.Run(map[bool]string{false: "refuse", true: "drop oldest"}[dropOldest], func(t *testing.T) {
			b := testenv.StartBroker(t)
			js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
			ctx := testenv.Context(t, 30*time.Second)
			if _, err := events.EnsureStream(ctx, js, events.StreamConfig{MaxBytes: 32 << 10, DropOldest: dropOldest}); err != nil {
				t.Fatal(err)
			}
			s, err := events.EnsureStream(ctx, js, events.StreamConfig{DropOldest: dropOldest})
			if err != nil || s.CachedInfo().Config.MaxBytes != 32<<10 {
				t.Fatalf("ensured again without a size: %v, max bytes %d; want 32 KiB kept", err, s.CachedInfo().Config.MaxBytes)
			}
			log := events.NewLog(js, "", "")
			var last uint64
			var appended uint64
			for seq := uint64(1); seq <= 400; seq++ {
				n, err := log.Append(ctx, newEvent("s1", seq, events.PhaseStart), last)
				if err != nil {
					var e *errcode.Error
					if dropOldest || !errors.As(err, &e) || e.Code != errcode.StorageQuotaExceeded ||
						!strings.Contains(e.Message, "SBX_EVENTS") || !strings.Contains(e.Message, "--events-max-bytes") {
						t.Fatalf("append %d: %v; want storage_quota_exceeded naming the stream and --events-max-bytes (drop oldest: no error)", seq, err)
					}
					break
				}
				last, appended = n, seq
			}
			u, err := storage.Read(ctx, js, events.DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := log.StreamInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !dropOldest && (appended == 400 || info.State.FirstSeq != 1 || info.State.Msgs != appended):
				t.Fatalf("refusing: %d appended, stream holds %d from seq %d; want it full before 400, every event kept", appended, info.State.Msgs, info.State.FirstSeq)
			case dropOldest && (appended != 400 || info.State.FirstSeq == 1 || u.Bytes > 32<<10):
				t.Fatalf("dropping: %d appended, first seq %d, %d bytes; want all 400 taken, the oldest dropped, within 32 KiB", appended, info.State.FirstSeq, u.Bytes)
			}
		})
	}
}
