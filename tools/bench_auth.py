"""``python -m croupier.tools.bench_auth``: what signing and checking one PUSH costs (PROTOCOL §2.1).

Builds the PUSH a writer sends for 64 batches of 64 KiB (a 2,304-byte header frame and
64 data frames, 4 MiB), then times, on this thread, building its frames unsigned and
signed with an app key (``request_frames``), and checking the signed ones
(``Verifier.check``: the app key from the cache, the MAC, the nonce window and memory).
Prints microseconds per request, the best of ``--repeat`` rounds of ``--requests``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from croupier.core.wire import MsgType, encode_body
from croupier.transports.auth import Signer, Verifier, request_frames
from croupier.transports.secret import ClusterSecret

__all__ = ["main", "measure"]


def _push(batches: int) -> tuple[dict[str, Any], list[bytes]]:
    body = {
        "app_id": "bench-0123456789",
        "shuffle_id": 3,
        "incarnation": "0123456789abcdef",
        "batches": [[i, 0] for i in range(batches)],
        "replica": {
            "worker_id": "worker-0123456789ab",
            "url": "tcp://10.0.0.2:40000",
            "incarnation": "f" * 16,
        },
    }
    payloads = [os.urandom(36 * batches)] + [os.urandom(64 * 1024) for _ in range(batches)]
    return body, payloads


def _best(run: Callable[[], None], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def measure(requests: int = 5000, repeat: int = 5, batches: int = 64) -> dict[str, float]:
    """Microseconds per request: ``build_unsigned``, ``build_signed``, ``sign`` (their
    difference) and ``verify``; and the PUSH's size in bytes."""
    secret = ClusterSecret(os.urandom(32))
    body, payloads = _push(batches)
    signer = Signer()
    signer.add_app(str(body["app_id"]), secret.app_key(str(body["app_id"])))

    def build(with_signer: Signer | None) -> Callable[[], None]:
        def run() -> None:
            for i in range(requests):
                request_frames(with_signer, MsgType.PUSH, i + 1, body, encode_body(body), payloads)

        return run

    unsigned = _best(build(None), requests, repeat)
    signed = _best(build(signer), requests, repeat)
    rounds = [
        [
            request_frames(signer, MsgType.PUSH, i + 1, body, encode_body(body), payloads)
            for i in range(requests)
        ]
        for _ in range(repeat)
    ]
    verifier = Verifier(secret)
    best_verify = float("inf")
    for frames in rounds:
        start = time.perf_counter()
        for f in frames:
            verifier.check(MsgType.PUSH, f[0], body, f[1], f[2], f[3:])
        best_verify = min(best_verify, (time.perf_counter() - start) / requests)
    return {
        "build_unsigned_us": round(unsigned, 2),
        "build_signed_us": round(signed, 2),
        "sign_us": round(signed - unsigned, 2),
        "verify_us": round(best_verify * 1e6, 2),
        "push_bytes": sum(len(p) for p in payloads),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m croupier.tools.bench_auth", description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batches", type=int, default=64)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.requests, args.repeat, args.batches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
