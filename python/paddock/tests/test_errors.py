"""paddock.errors: one exception class per error code, and the wire's errors raised as them."""

from __future__ import annotations

import builtins
import pickle
import uuid

import pytest

import paddock
from paddock import errors, error_for
from paddock.contract import ERROR_CODES, OP_RUNNING, RETRYABLE_CODES
from paddock.errors import ERRORS, PaddockError, SessionNotFound, Unavailable


def test_each_code_has_its_class() -> None:
    assert sorted(ERRORS) == sorted(ERROR_CODES) and len(ERROR_CODES) > 20
    assert set(RETRYABLE_CODES) <= set(ERROR_CODES)
    names = set()
    for code in ERROR_CODES:
        cls = ERRORS[code]
        assert issubclass(cls, PaddockError) and cls is not PaddockError, code
        assert cls.code == code and getattr(errors, cls.__name__) is cls
        assert cls.retryable == (code in RETRYABLE_CODES), code
        assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__name__} has no docstring"
        assert not hasattr(builtins, cls.__name__), f"{cls.__name__} shadows a builtin"
        names.add(cls.__name__)
        e = error_for(code, "what happened")
        assert type(e) is cls, (code, type(e))
        assert (e.code, e.message, e.retryable) == (code, "what happened", code in RETRYABLE_CODES)
        assert str(e) == f"{code}: what happened"
        # The wire's flag wins over the registry's.
        assert error_for(code, "m", not cls.retryable).retryable is not cls.retryable
        # A class raised by name carries its code too.
        assert (cls("m").code, cls("m").retryable) == (code, cls.retryable)
    assert len(names) == len(ERROR_CODES)
    # Spot checks against the registry as docs/architecture.md has it.
    assert SessionNotFound.code == "session_not_found" and not SessionNotFound.retryable
    assert Unavailable.code == "unavailable" and Unavailable.retryable
    assert errors.PaddockRuntimeError.code == "runtime_error" and errors.PaddockRuntimeError.retryable


def test_unknown_code_falls_back() -> None:
    e = error_for("a_code_from_the_future", "m")
    assert type(e) is PaddockError
    assert (e.code, e.message, e.retryable) == ("a_code_from_the_future", "m", False)
    assert error_for("a_code_from_the_future", "m", True).retryable is True
    # The base class, built by code as before, takes the registry's flag.
    assert PaddockError("unavailable", "m").retryable is True
    assert PaddockError("not_found", "m").retryable is False


def test_errors_pickle() -> None:
    for e in (SessionNotFound("gone"), Unavailable("down", retryable=False), error_for("unheard_of", "m", True)):
        got = pickle.loads(pickle.dumps(e))
        assert type(got) is type(e) and (got.code, got.message, got.retryable) == (e.code, e.message, e.retryable)


async def test_wire_errors_are_specific(client: paddock.Client) -> None:
    if True:
        t = client.transport
        missing = str(uuid.uuid4())
        # The engine's reply to a lookup of a session that never was.
        with pytest.raises(SessionNotFound) as err:
            await t.lookup(missing)
        assert err.value.code == "session_not_found" and not err.value.retryable and err.value.message
        # A command on that session finds no node; the transport asks the engine why.
        with pytest.raises(SessionNotFound):
            await t.request(t.session_subject(missing, OP_RUNNING), session=missing, timeout=10)
        # An error still is a PaddockError for the callers that catch that.
        with pytest.raises(PaddockError):
            await t.lookup(missing)
