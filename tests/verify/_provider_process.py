"""A provider replica in a process of its own: ``nonces.db`` on the command line,
``port <n>`` printed once it listens. Refunds are appended to ``<nonces.db>.effects``
(one line per effect, so the test sees every replica's)."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.verify import GrantMiddleware, SqliteNonceStore, Verifier
from interlock.verify.tokens import public_jwk

# support.py's key and time (a script, not a test module: it cannot import them)
INTERLOCK_KEY = Ed25519PrivateKey.from_private_bytes(
    hashlib.sha256(b"interlock test key 1").digest()
)
NOW = 1_700_000_000


def main() -> None:
    nonces = Path(sys.argv[1])
    effects = nonces.with_suffix(".effects")

    async def refunds(scope: Any, receive: Any, send: Any) -> None:
        grant = scope["state"]["interlock_grant"]
        body = (await receive())["body"]
        with effects.open("a") as out:
            out.write(json.dumps({"grant": grant.grant_id, "body": body.decode()}) + "\n")
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": grant.grant_id.encode()})

    verifier = Verifier(
        {"keys": [public_jwk("k1", INTERLOCK_KEY.public_key())]},
        audience="shop",
        nonces=SqliteNonceStore(nonces),
        clock=lambda: NOW + 5,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(GrantMiddleware(refunds, verifier), log_level="critical")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
