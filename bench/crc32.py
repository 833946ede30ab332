"""The CRC-32 seal of LMDB and SQLite values: iqstate-speedups' C against maintained wheels.

Run: `.venv/bin/python bench/crc32.py [--repeat 7]` (needs `pip install isal zlib-ng`).

`isal` (Intel's ISA-L) and `zlib-ng` ship wheels whose `crc32` is zlib's CRC-32 computed with
the CPU's vector instructions, so either could replace the hand-written PCLMULQDQ code of
`iqstate_speedups` (`crc32.c`) and keep the stored format. They are called from Python, so
the seal's Python functions (`iqstate.sealing.PYTHON`) run with each library's `crc32`, against
the compiled functions in use today, on what the engines do:

- `seal`, `unseal`: one record (a 16-byte key and a value of `--value-bytes`), as a put and a
  key lookup do;
- `seal_pairs`: a batch of 10,000 records, as a batch commit does;
- `unseal_below`: a 100-record range read, checked and bounded, as LMDB's range scan does.

Each line gives microseconds per call (best of `--repeat` runs) and the ratio to the
compiled functions (>1: slower than today).
"""

from __future__ import annotations

import argparse
import timeit
import zlib
from collections.abc import Callable
from typing import Any

from iqstate import sealing


def crc_variants() -> dict[str, Callable[..., int]]:
    variants: dict[str, Callable[..., int]] = {"zlib": zlib.crc32}
    try:
        from isal import isal_zlib

        variants["isal"] = isal_zlib.crc32
    except ImportError:
        print("isal is not installed: pip install isal")
    try:
        from zlib_ng import zlib_ng

        variants["zlib-ng"] = zlib_ng.crc32
    except ImportError:
        print("zlib-ng is not installed: pip install zlib-ng")
    return variants


def best_us(call: Callable[[], Any], number: int, repeat: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--value-bytes", type=int, nargs="+", default=[100, 4096])
    args = parser.parse_args()
    if not sealing.COMPILED:
        raise SystemExit("iqstate-speedups' sealing is not built here: nothing to compare with")
    python_seal, python_seal_pairs, _, _, python_unseal_below, _ = sealing.PYTHON
    python_unseal = sealing.PYTHON[2]
    variants = crc_variants()
    for size in args.value_bytes:
        key, value = b"k" * 16, bytes(range(256)) * (size // 256) + b"v" * (size % 256)
        stored = sealing.seal(key, value)
        batch = [(b"%016d" % n, value) for n in range(10_000)]
        rows = sorted((k, sealing.seal(k, v)) for k, v in batch[:100])
        jobs: dict[str, tuple[int, Callable[..., Any], tuple[Any, ...], Callable[..., Any]]] = {
            "seal": (20_000, sealing.seal, (key, value), python_seal),
            "unseal": (20_000, sealing.unseal, (key, stored), python_unseal),
            "seal_pairs (10,000)": (3, sealing.seal_pairs, (batch,), python_seal_pairs),
            "unseal_below (100)": (
                2_000,
                sealing.unseal_below,
                (rows, None, False),
                python_unseal_below,
            ),
        }
        print(f"value of {size} bytes, 16-byte key:")
        for job, (number, compiled, arguments, python) in jobs.items():
            baseline = best_us(lambda c=compiled, a=arguments: c(*a), number, args.repeat)
            line = f"  {job:<20} compiled (today) {baseline:9.2f} us"
            for name, crc in variants.items():
                sealing.crc32 = crc  # the Python functions look crc32 up when called
                try:
                    measured = best_us(lambda p=python, a=arguments: p(*a), number, args.repeat)
                finally:
                    sealing.crc32 = zlib.crc32
                line += f" | Python + {name} {measured:9.2f} us ({measured / baseline:4.2f}x)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
