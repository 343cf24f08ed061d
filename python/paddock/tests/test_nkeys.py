"""The credentials' nkey code against a known seed, with and without `cryptography`."""

from __future__ import annotations

import base64

import pytest

from paddock import _nkeys



def _seed_and_public() -> tuple[str, str]:
    # Made here from fixed bytes, so the test does not depend on another tool's output.
    raw = bytes(range(32))
    prefix = bytes([_nkeys._PREFIX_SEED | (_nkeys._PREFIX_USER >> 5), (_nkeys._PREFIX_USER & 31) << 3])
    body = prefix + raw
    seed = _nkeys._b32encode(body + _nkeys._crc16(body).to_bytes(2, "little"))
    return seed, _nkeys.encode_user_public(_nkeys._pure_public(raw))


def test_seed_round_trip_and_signatures_agree() -> None:
    seed, public = _seed_and_public()
    assert seed.startswith("SU") and public.startswith("U")
    assert _nkeys.decode_user_seed(seed) == bytes(range(32))
    key = _nkeys.UserKey(seed)
    assert key.public_key == public
    sig = key.sign(b"nonce")
    assert len(sig) == 64 and sig == _nkeys._pure_sign(bytes(range(32)), b"nonce")
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        pytest.skip("no cryptography to verify against")
    pub = _nkeys._b32decode(public)[1:33]
    Ed25519PublicKey.from_public_bytes(pub).verify(sig, b"nonce")  # raises if invalid


def test_bad_seeds_are_refused() -> None:
    seed, _ = _seed_and_public()
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_user_seed(seed[:-1] + ("A" if seed[-1] != "A" else "B"))  # checksum
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_user_seed("not base32!")
    with pytest.raises(_nkeys.NkeyError):
        _nkeys.decode_user_seed(base64.b32encode(b"x" * 10).decode())
