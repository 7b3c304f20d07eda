"""Client time to turn a stored record into a Message, beside its parts, in one run.

    python -m benchmarks.bench_decode [--repeats 7] [--number 100000]

For a small dict payload and a 1 KB one: ``codec.decode`` (a record as a pop returns it
becomes a Message: header, msgpack body, checks, the object), beside the msgpack decode
of the same body alone (``msgpack.unpackb``, what codec uses), msgspec's decoder of that
body when msgspec is installed (the compiled alternative: ``pip install msgspec``), and
the Message object made from ready values. The sides alternate in every round; each
figure is the median of --repeats rounds (µs a record) with its range. No server.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

import msgpack

from benchmarks.common import parser, table
from dynoq._core import codec
from dynoq.message import Message

PAYLOADS: dict[str, Any] = {
    "small dict": {"order": 12345, "user": "alice", "amount": 9.99},
    "1 KB": {"blob": "x" * 1000, "n": list(range(10))},
}


def sides(payload: Any) -> dict[str, Callable[[], object]]:
    body = msgpack.packb([payload], use_bin_type=True)
    record = b"lzxq3k1a,0,0," + body
    out: dict[str, Callable[[], object]] = {
        "codec.decode (record -> Message)": lambda: codec.decode("id", record, 0, 1, "tok"),
        "msgpack.unpackb (body only)": lambda: msgpack.unpackb(
            body, raw=False, strict_map_key=False
        ),
        "Message(...) (object only)": lambda: Message(
            payload, "id", 0.0, 0, None, None, None, 0, 1, 1.0, 1.0, "tok", None
        ),
    }
    try:
        import msgspec  # optional: measured when installed
    except ImportError:
        return out
    decode = msgspec.msgpack.Decoder().decode
    out["msgspec decode (body only)"] = lambda: decode(body)
    return out


def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(repeats=7)
    p.add_argument("--number", type=int, default=100_000, help="calls a round")
    args = p.parse_args()
    rows: list[tuple[str, ...]] = [("payload, step", "median us", "range")]
    for name, payload in PAYLOADS.items():
        fns = sides(payload)
        spent: dict[str, list[float]] = {k: [] for k in fns}
        for i in range(args.repeats):
            order = list(fns) if i % 2 == 0 else list(reversed(fns))
            for k in order:
                spent[k].append(timeit.timeit(fns[k], number=args.number) / args.number * 1e6)
        for k, values in spent.items():
            rows.append(
                (
                    f"{name}: {k}",
                    f"{statistics.median(values):.3f}",
                    f"{min(values):.3f}-{max(values):.3f}",
                )
            )
    print(f"{args.number:,} calls a round, {args.repeats} rounds, sides alternating")
    print(table(rows))


if __name__ == "__main__":
    main()
