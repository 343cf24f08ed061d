package events

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Signature headers: every event a node appends carries the node's
// ed25519 signature over the event's stored bytes (which include
// prev_hash, so the signature covers the chain too) in SigHeader, and the
// signing public key (an nkey, "U...") in SignerHeader. They are headers,
// not JSON members, so that the signed bytes are exactly the stored bytes
// and Hash is unchanged.
const (
	SigHeader    = "Paddock-Sig"
	SignerHeader = "Paddock-Signer"
)

// Signer signs event bytes; an nkeys.KeyPair is one.
type Signer interface {
	Sign(input []byte) ([]byte, error)
	PublicKey() (string, error)
}

// Signed returns a copy of l that signs every event it appends with s. An
// nkeys key pair is unwrapped once into its ed25519 key: nkeys derives
// the key from the seed on every Sign, which doubles the cost.
func (l *Log) Signed(s Signer) (*Log, error) {
	pub, err := s.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("events: signer's public key: %w", err)
	}
	if kp, ok := s.(interface{ PrivateKey() ([]byte, error) }); ok {
		if enc, err := kp.PrivateKey(); err == nil {
			if raw, err := nkeys.Decode(nkeys.PrefixBytePrivate, enc); err == nil && len(raw) == ed25519.PrivateKeySize {
				s = edSigner(raw)
			}
		}
	}
	c := *l
	c.signer, c.signerKey = s, pub
	return &c, nil
}

// edSigner signs with a raw ed25519 private key.
type edSigner ed25519.PrivateKey

func (k edSigner) Sign(input []byte) ([]byte, error) {
	return ed25519.Sign(ed25519.PrivateKey(k), input), nil
}

func (k edSigner) PublicKey() (string, error) {
	b, err := nkeys.Encode(nkeys.PrefixByteUser, ed25519.PrivateKey(k).Public().(ed25519.PublicKey))
	return string(b), err
}

// SigningKey is the public key l signs with ("" for an unsigned log).
func (l *Log) SigningKey() string { return l.signerKey }

// SignatureHeader returns the signature headers Append puts on an event
// whose stored bytes are data, or nil when l does not sign.
func (l *Log) SignatureHeader(data []byte) (nats.Header, error) {
	if l.signer == nil {
		return nil, nil
	}
	sig, err := l.signer.Sign(data)
	if err != nil {
		return nil, fmt.Errorf("events: sign: %w", err)
	}
	return nats.Header{
		SignerHeader: []string{l.signerKey},
		SigHeader:    []string{base64.RawURLEncoding.EncodeToString(sig)},
	}, nil
}

// Signature errors, for errors.Is.
var (
	// ErrUnsigned: the event carries no signature.
	ErrUnsigned = errors.New("event is not signed")
	// ErrBadSignature: the signature does not verify with its key.
	ErrBadSignature = errors.New("signature does not verify")
)

// VerifySignature checks that sig (as SigHeader holds it) is signer's
// signature of data. It returns ErrUnsigned when either is empty and
// ErrBadSignature (wrapped) when it does not verify.
func VerifySignature(signer, sig string, data []byte) error {
	if signer == "" || sig == "" {
		return ErrUnsigned
	}
	pub, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(signer))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: signer %q is not a user public key", ErrBadSignature, signer)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: not base64url", ErrBadSignature)
	}
	if !ed25519.Verify(ed25519.PublicKey(pub), data, raw) {
		return fmt.Errorf("%w (key %s)", ErrBadSignature, signer)
	}
	return nil
}
