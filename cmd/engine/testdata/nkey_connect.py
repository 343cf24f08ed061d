"""Connect with nats.py's nkeys_seed= to a Paddock broker, as a fleet's Python would.

Usage: python3 nkey_connect.py URL NKEY_FILE INBOX_PREFIX TENANT
(cmd/engine's TestAuthCredsNatsPy runs it with nats.py and python/paddock on PYTHONPATH: the
`nkeys` package nats.py signs with is not installable offline, so paddock's stand-in of it is used
when it is missing; nats.py's own nkeys_seed= option still reads the file.)

Publishes one message on the tenant's command subject, then sends a request there under the
identity's inbox prefix and prints the reply's body on stdout.
"""

import asyncio
import sys

import nats

try:
    import nkeys  # noqa: F401
except ImportError:
    from paddock._nkeys import ensure_nkeys_module

    ensure_nkeys_module()


async def main(url: str, nkey_file: str, inbox: str, tenant: str) -> None:
    nc = await nats.connect(url, nkeys_seed=nkey_file, inbox_prefix=inbox, allow_reconnect=False, connect_timeout=10)
    try:
        await nc.publish(f"sbx.cmd.{tenant}.py-1.running", b'{"from":"nats.py"}')
        reply = await nc.request(f"sbx.cmd.{tenant}.py-1.lookup", b"{}", timeout=10)
        print(reply.data.decode())
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
