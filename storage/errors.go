package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes for writes and reservations that do not fit
// (nats-server's server/errors.json; nats.go names none of them).
const (
	// ErrCodeAccountStoreFull: the account's JetStream store is full
	// (JSAccountResourcesExceededErr).
	ErrCodeAccountStoreFull jetstream.ErrorCode = 10002
	// ErrCodeServerStoreFull: the server's JetStream store is full
	// (JSInsufficientResourcesErr, "insufficient resources"). The server
	// checks its total use on every write, whatever the streams reserve.
	ErrCodeServerStoreFull jetstream.ErrorCode = 10023
	// ErrCodeReservation: the store cannot reserve a stream's MaxBytes
	// beside what the other streams reserve (JSStorageResourcesExceededErr,
	// "insufficient storage resources available").
	ErrCodeReservation jetstream.ErrorCode = 10047
	// ErrCodeStreamStoreFailed: the stream refused to store the message
	// (JSStreamStoreFailedF): with discard-new, a stream at its MaxBytes
	// ("maximum bytes exceeded"); also a write error of the server.
	ErrCodeStreamStoreFailed jetstream.ErrorCode = 10077
)

// StoreFull reports whether err is JetStream refusing a write because the
// server's or the account's store is full: no stream of it can take more.
func StoreFull(err error) bool {
	c := apiErrCode(err)
	return c == ErrCodeServerStoreFull || c == ErrCodeAccountStoreFull
}

// StreamRefused reports whether err is a stream refusing to store a
// message (ErrCodeStreamStoreFailed). For a discard-new stream at its
// MaxBytes that is a full stream; the caller tells that from a write error
// by the stream's state (see Usage.Fits).
func StreamRefused(err error) bool { return apiErrCode(err) == ErrCodeStreamStoreFailed }

// ReservationError explains JetStream's refusal to reserve maxBytes for a
// stream (the server's or the account's store cannot hold every stream's
// MaxBytes) and returns any other error as it is.
func ReservationError(err error, stream string, maxBytes int64) error {
	if apiErrCode(err) == ErrCodeReservation {
		return fmt.Errorf("the JetStream store cannot reserve %d bytes for %s beside what the other streams reserve: give it less, or the server more (max_file_store): %w", maxBytes, stream, err)
	}
	return err
}

// KeepMaxBytes returns the MaxBytes to give stream: want when positive,
// else the limit the stream has, or -1 (none) when it has none or does not
// exist yet. It fails only when the stream cannot be looked up.
func KeepMaxBytes(ctx context.Context, js jetstream.JetStream, stream string, want int64) (int64, error) {
	if want > 0 {
		return want, nil
	}
	s, err := js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return -1, nil
	case err != nil:
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	if mb := s.CachedInfo().Config.MaxBytes; mb > 0 {
		return mb, nil
	}
	return -1, nil
}

func apiErrCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}
