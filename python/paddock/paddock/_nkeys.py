"""NATS nkeys for a user seed: decode "SU..." seeds, derive the public key, sign the server's nonce.

nats.py signs with the ``nkeys`` package (PyNaCl; ``pip install nats-py[nkeys]``) when given
``nkeys_seed_str``, its public option for nkey authentication. Where that package is missing,
:func:`ensure_nkeys_module` provides a module of the same name and interface (``from_seed``,
``KeyPair.public_key``/``sign``/``wipe``) backed by this module: ``cryptography``'s Ed25519 when it
is installed, and otherwise a small pure-Python Ed25519 (RFC 8032's reference algorithm: slow,
about 10 ms a signature, once per connect). No nats.py method is overridden.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import types

_PREFIX_SEED = 18 << 3  # 'S'
_PREFIX_USER = 20 << 3  # 'U'


class NkeyError(ValueError):
    """The seed is not a valid nkey user seed."""


def _crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def _b32decode(s: str) -> bytes:
    pad = "=" * (-len(s) % 8)
    return base64.b32decode(s + pad)


def _b32encode(b: bytes) -> str:
    return base64.b32encode(b).decode().rstrip("=")


def decode_user_seed(seed: str) -> bytes:
    """Return the 32-byte Ed25519 seed of an nkey user seed ("SU..."), or raise NkeyError."""
    try:
        raw = _b32decode(seed.strip())
    except Exception as e:  # binascii.Error
        raise NkeyError("the seed is not base32") from e
    if len(raw) != 36:
        raise NkeyError(f"the seed decodes to {len(raw)} bytes, want 36")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if _crc16(body) != crc:
        raise NkeyError("the seed's checksum does not match")
    b1 = body[0] & 0xF8
    b2 = ((body[0] & 0x07) << 5) | ((body[1] & 0xF8) >> 3)
    if b1 != _PREFIX_SEED or b2 != _PREFIX_USER:
        raise NkeyError("not a user seed (want SU...)")
    return bytes(body[2:34])


def encode_user_public(pub: bytes) -> str:
    """Return the nkey user public key ("U...") of a 32-byte Ed25519 public key."""
    body = bytes([_PREFIX_USER]) + pub
    return _b32encode(body + _crc16(body).to_bytes(2, "little"))


class UserKey:
    """A user nkey from its seed: ``public_key`` ("U...") and ``sign(data)`` (64 bytes)."""

    def __init__(self, seed: str) -> None:
        self._seed = decode_user_seed(seed)
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            key = Ed25519PrivateKey.from_private_bytes(self._seed)
            self._sign = key.sign
            pub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        except ImportError:
            self._sign = lambda data: _pure_sign(self._seed, data)
            pub = _pure_public(self._seed)
        self.public_key = encode_user_public(pub)

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature of data (64 bytes)."""
        return self._sign(data)


class _KeyPair:
    """The part of the ``nkeys`` package's KeyPair that nats.py uses."""

    def __init__(self, seed: bytes | bytearray) -> None:
        self._key = UserKey(bytes(seed).decode())
        self.public_key = self._key.public_key.encode()

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def wipe(self) -> None:
        self._key = None  # type: ignore[assignment]


def ensure_nkeys_module() -> None:
    """Make ``import nkeys`` work for nats.py: the real package when installed, else a module of
    the same interface backed by :class:`UserKey` (user seeds only, which is all Paddock issues)."""
    if "nkeys" in sys.modules:
        return
    try:
        import nkeys  # noqa: F401
        return
    except ImportError:
        pass
    mod = types.ModuleType("nkeys", "paddock's stand-in for the nkeys package (user seeds only)")
    mod.KeyPair = _KeyPair  # type: ignore[attr-defined]
    mod.from_seed = _KeyPair  # type: ignore[attr-defined]
    sys.modules["nkeys"] = mod


# --- pure-Python Ed25519 (RFC 8032, section 6), used only without `cryptography` ---

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_I = pow(2, (_P - 1) // 4, _P)


def _inv(x: int) -> int:
    return pow(x, _P - 2, _P)


def _xrecover(y: int) -> int:
    xx = (y * y - 1) * _inv(_D * y * y + 1)
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P != 0:
        x = (x * _I) % _P
    if x % 2 != 0:
        x = _P - x
    return x


_BY = 4 * _inv(5) % _P
_B = (_xrecover(_BY), _BY, 1, _xrecover(_BY) * _BY % _P)


def _add(p: tuple, q: tuple) -> tuple:
    a = (p[1] - p[0]) * (q[1] - q[0]) % _P
    b = (p[1] + p[0]) * (q[1] + q[0]) % _P
    c = 2 * p[3] * q[3] * _D % _P
    d = 2 * p[2] * q[2] % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, p: tuple) -> tuple:
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _encode_point(p: tuple) -> bytes:
    zi = _inv(p[2])
    x, y = p[0] * zi % _P, p[1] * zi % _P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _secret(seed: bytes) -> tuple[int, bytes]:
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def _pure_public(seed: bytes) -> bytes:
    a, _ = _secret(seed)
    return _encode_point(_mul(a, _B))


def _pure_sign(seed: bytes, msg: bytes) -> bytes:
    a, prefix = _secret(seed)
    pub = _encode_point(_mul(a, _B))
    r = int.from_bytes(hashlib.sha512(prefix + msg).digest(), "little") % _L
    rs = _encode_point(_mul(r, _B))
    h = int.from_bytes(hashlib.sha512(rs + pub + msg).digest(), "little") % _L
    s = (r + h * a) % _L
    return rs + int.to_bytes(s, 32, "little")
