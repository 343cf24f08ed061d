package errcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestRegistry(t *testing.T) {
	required := []Code{InvalidRequest, UnknownOp, InvalidPath, NotFound, SessionNotFound, AlreadyExists,
		PayloadTooLarge, ExecTimeout, RuntimeError, ConcurrencyConflict, Unavailable}
	for _, c := range required {
		if !Known(c) || c.Description() == "" {
			t.Errorf("code %s missing from the registry", c)
		}
	}
	if len(Codes()) < len(required) {
		t.Fatalf("registry has %d codes, want at least %d", len(Codes()), len(required))
	}
	if !Unavailable.Retryable() || InvalidPath.Retryable() || Code("nope").Retryable() {
		t.Fatal("retryable flags are wrong")
	}
}

func TestIsMatchesByCode(t *testing.T) {
	err := fmt.Errorf("layer: %w", New(NotFound, "file %s", "a"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatal("wrapped not_found does not match ErrNotFound")
	}
	if errors.Is(err, ErrInvalidPath) {
		t.Fatal("not_found matches ErrInvalidPath")
	}
	if Of(err) != NotFound || Of(errors.New("x")) != Internal || Of(nil) != "" {
		t.Fatal("Of gives the wrong code")
	}
	cause := errors.New("disk on fire")
	w := Wrap(RuntimeError, cause, "write")
	if !errors.Is(w, cause) || w.Error() != "runtime_error: write: disk on fire" {
		t.Fatalf("Wrap = %q, want the cause kept", w.Error())
	}
	if w.Message != "write" {
		t.Fatalf("Wrap message = %q, want the cause's text kept off the wire", w.Message)
	}
}

func TestInternalIsNotRetryable(t *testing.T) {
	if Internal.Retryable() {
		t.Fatal("internal is retryable: a bug does not go away when the same command is sent again")
	}
}
