"""Client time to turn a stored record into a Message, beside its parts, in one run.

    python -m benchmarks.bench_decode [--repeats 7] [--number 100000]

For a small dict payload and a 1 KB one: a pop's reply of 100 records made messages
(``Plain.decoded``, as every pop of a concurrent queue does; a figure a record),
``codec.decode`` (one record becomes a Message: header, body, checks, the object), beside
the msgpack decode
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

import dynoq
from benchmarks.common import parser, table
from dynoq._core import codec
from dynoq.message import Message

PAYLOADS: dict[str, Any] = {
    "small dict": {"order": 12345, "user": "alice", "amount": 9.99},
    "1 KB": {"blob": "x" * 1000, "n": list(range(10))},
}


KIND = dynoq.connect("memory://").queue("decode", shards=1).ops  # a concurrent queue's


def sides(payload: Any) -> dict[str, Callable[[], object]]:
    body = msgpack.packb([payload], use_bin_type=True)
    record = b"lzxq3k1a,0,0," + body
    # A pop reply as pop-13.lua makes it: 1, what is left, the batch's score, then id,
    # record, attempts a message
    reply = [1, 0, b"1717428451738.25", *[b"abcdefghijklmnop", record, 1] * 100]
    kind = KIND.kind
    out: dict[str, Callable[[], object]] = {
        "a pop's reply (100 records -> Messages)": lambda: kind.decoded(reply, 0, "n0", ""),
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
                n = args.number // 100 if k.startswith("a pop's") else args.number
                per = 100 if k.startswith("a pop's") else 1  # records a call
                spent[k].append(timeit.timeit(fns[k], number=n) / n / per * 1e6)
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
