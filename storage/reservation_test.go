package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

const MiB = 1 << 20

// smallStore starts a server whose JetStream may store 32 MiB.
func smallStore(t *testing.T) jetstream.JetStream {
	t.Helper()
	b := testenv.StartBrokerWith(t, broker.Config{MaxStore: 32 * MiB, SyncInterval: time.Second})
	if got := b.MaxStore(); got != 32*MiB {
		t.Fatalf("max store %d, want %d", got, 32*MiB)
	}
	return testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
}

// fill publishes size-byte messages on subj until one is refused, and
// returns that refusal.
func fill(ctx context.Context, t *testing.T, js jetstream.JetStream, subj string, size int) error {
	t.Helper()
	data := bytes.Repeat([]byte("x"), size)
	for i := 0; i < 1_000_000; i++ {
		if _, err := js.Publish(ctx, subj, data); err != nil {
			return err
		}
	}
	t.Fatalf("%s took a million messages", subj)
	return nil
}

// TestReservation pins down what JetStream does with a stream's MaxBytes,
// which the split of the store rests on (see the package doc):
//  1. MaxBytes is reserved: a stream whose MaxBytes does not fit beside the
//     others' reservations is refused (10047), on create and on update;
//  2. a write is checked against the server's total use only: a stream
//     without MaxBytes fills the space another stream reserved, and then
//     that stream's writes fail too (10023), the issue's "insufficient
//     resources";
//  3. with every stream bounded, a discard-new stream at its MaxBytes
//     refuses its own writes (10077) and the reserved stream fills its
//     whole reservation.
func TestReservation(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	t.Run("reserved", func(t *testing.T) {
		js := smallStore(t)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}, MaxBytes: 8 * MiB}); err != nil {
			t.Fatal(err)
		}
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, MaxBytes: 25 * MiB})
		if werr := storage.ReservationError(err, "BIG", 25*MiB); err == nil || !strings.Contains(werr.Error(), "cannot reserve") {
			t.Fatalf("a 25 MiB stream beside 8 MiB reserved of 32: %v, want refused (10047)", err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FIT", Subjects: []string{"fit.>"}, MaxBytes: 24 * MiB}); err != nil {
			t.Fatalf("a 24 MiB stream beside 8 MiB reserved of 32: %v, want it to fit", err)
		}
		_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: "FIT", Subjects: []string{"fit.>"}, MaxBytes: 25 * MiB})
		if storage.ReservationError(err, "FIT", 25*MiB) == err {
			t.Fatalf("raising FIT past the store: %v, want refused (10047)", err)
		}
	})
	t.Run("unbounded stream starves a reserved one", func(t *testing.T) {
		js := smallStore(t)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}, MaxBytes: 8 * MiB, Discard: jetstream.DiscardNew}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OBJ", Subjects: []string{"obj.>"}}); err != nil {
			t.Fatal(err)
		}
		if err := fill(ctx, t, js, "obj.x", 256<<10); !storage.StoreFull(err) {
			t.Fatalf("filling the unbounded stream ended with %v, want the store full (10023)", err)
		}
		err := fill(ctx, t, js, "ev.x", 1000)
		u, rerr := storage.Read(ctx, js, "EV")
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !storage.StoreFull(err) || u.Bytes > 1*MiB {
			t.Fatalf("the reserved stream holds %d of its %d bytes and ended with %v; want it refused early with the store full", u.Bytes, u.MaxBytes, err)
		}
		t.Logf("EV reserved %d bytes and was refused at %d: %v", u.MaxBytes, u.Bytes, err)
	})
	t.Run("all bounded", func(t *testing.T) {
		js := smallStore(t)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}, MaxBytes: 8 * MiB, Discard: jetstream.DiscardNew}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OBJ", Subjects: []string{"obj.>"}, MaxBytes: 20 * MiB, Discard: jetstream.DiscardNew}); err != nil {
			t.Fatal(err)
		}
		if err := fill(ctx, t, js, "obj.x", 256<<10); !storage.StreamRefused(err) || storage.StoreFull(err) {
			t.Fatalf("filling the bounded stream ended with %v, want it refused at its own limit (10077)", err)
		}
		err := fill(ctx, t, js, "ev.x", 1000)
		u, rerr := storage.Read(ctx, js, "EV")
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !storage.StreamRefused(err) || u.Percent() < 99 {
			t.Fatalf("the reserved stream holds %.1f%% of its limit and ended with %v; want it full (10077)", u.Percent(), err)
		}
	})
}

// TestErrorClassifiers: the classifiers match by JetStream's code, never
// by text, and see through wrapping.
func TestErrorClassifiers(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("layer: %w", &jetstream.APIError{ErrorCode: code, Description: "whatever"})
	}
	for _, tc := range []struct {
		err              error
		full, refused, r bool
	}{
		{api(storage.ErrCodeServerStoreFull), true, false, false},
		{api(storage.ErrCodeAccountStoreFull), true, false, false},
		{api(storage.ErrCodeStreamStoreFailed), false, true, false},
		{api(storage.ErrCodeReservation), false, false, true},
		{api(10071), false, false, false},
		{errors.New("insufficient resources"), false, false, false},
		{nil, false, false, false},
	} {
		reserved := tc.err != nil && storage.ReservationError(tc.err, "S", 1) != tc.err
		if storage.StoreFull(tc.err) != tc.full || storage.StreamRefused(tc.err) != tc.refused || reserved != tc.r {
			t.Errorf("%v: full %v refused %v reservation %v; want %v %v %v", tc.err, storage.StoreFull(tc.err), storage.StreamRefused(tc.err), reserved, tc.full, tc.refused, tc.r)
		}
	}
}
