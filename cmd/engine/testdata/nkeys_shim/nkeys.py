"""A stand-in for the ``nkeys`` package, for TestAuthCredsNatsPy only.

nats.py signs the server's nonce for ``nkeys_seed=`` with ``nkeys`` (which needs PyNaCl); the
pysdk folder has neither and nothing can be pip-installed here. This module has the three things
nats.py calls (``from_seed``, ``KeyPair.public_key``, ``KeyPair.sign``, ``KeyPair.wipe``) for a
user seed, on ``cryptography``'s Ed25519, following the nkeys encoding: base32 of a prefix,
the 32-byte key and a CRC-16 (XMODEM), little endian. A fleet installs the real package
(``pip install nats-py[nkeys]``); nats.py's own code reads the seed file either way.
"""

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_PREFIX_SEED = 18 << 3  # 'S'
_PREFIX_USER = 20 << 3  # 'U'


def _crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


class KeyPair:
    def __init__(self, raw: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(raw)

    @property
    def public_key(self) -> bytes:
        pub = self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        body = bytes([_PREFIX_USER]) + pub
        return base64.b32encode(body + _crc16(body).to_bytes(2, "little")).rstrip(b"=")

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(bytes(data))

    def wipe(self) -> None:
        self._key = None


def from_seed(seed: bytes) -> KeyPair:
    s = bytes(seed).decode().strip()
    raw = base64.b32decode(s + "=" * (-len(s) % 8))
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if _crc16(body) != crc:
        raise ValueError("nkeys: bad seed checksum")
    if body[0] & 0xF8 != _PREFIX_SEED or ((body[0] & 7) << 5 | (body[1] & 0xF8) >> 3) != _PREFIX_USER:
        raise ValueError("nkeys: not a user seed")
    return KeyPair(body[2:34])
