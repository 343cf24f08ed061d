"""Credentials: Paddock's JSON file and a bare nkey seed file, both against a real engine."""

from __future__ import annotations

import json
import sys

import paddock
from paddock import _nkeys


async def test_nkey_seed_file(engine: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open(engine["PADDOCK_CREDS"]) as f:
        creds = json.load(f)
    nk = tmp_path / "client.nk"
    nk.write_text(creds["seed"] + "\n")
    c = await paddock.connect(creds=str(nk), tenant=creds["tenant"])
    try:
        assert c.creds is not None and c.creds.public_key == creds["public_key"]
        assert c.creds.inbox_prefix == "_INBOX." + creds["public_key"]
        # The server accepts the key and the inbox: a lookup reaches the engine and answers.
        try:
            await c.lookup("no-such-session")
        except paddock.errors.SessionNotFound:
            pass
    finally:
        await c.close()


def test_nkeys_stand_in_is_what_nats_py_uses() -> None:
    seed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"  # nkeys' own test seed
    _nkeys.ensure_nkeys_module()
    nkeys = sys.modules["nkeys"]
    kp = nkeys.from_seed(bytearray(seed.encode()))
    assert kp.public_key.decode() == _nkeys.UserKey(seed).public_key
    assert len(kp.sign(b"nonce")) == 64
    kp.wipe()
