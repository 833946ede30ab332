"""The compiled seal's CRC-32 (`iqstate_speedups.sealing.crc32`: carry-less multiply where
the CPU has it) is zlib's, for every length, starting value and alignment: the checksums
already on disk, and those written by a machine without it, must read back the same."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

compiled = pytest.importorskip("iqstate_speedups.sealing", reason="iqstate-speedups not built")

starts = st.integers(min_value=0, max_value=2**32 - 1)


@given(st.binary(max_size=2_000), starts)
def test_crc32_is_zlibs(data: bytes, start: int) -> None:
    assert compiled.crc32(data, start) == zlib.crc32(data, start)


@given(st.binary(min_size=1, max_size=300), st.integers(0, 15), starts)
def test_crc32_of_unaligned_bytes_is_zlibs(data: bytes, offset: int, start: int) -> None:
    view = memoryview(b"\x00" * offset + data)[offset:]  # data at every offset from 16
    assert compiled.crc32(view, start) == zlib.crc32(data, start)


@pytest.mark.parametrize(
    "length",
    [0, 1, 15, 16, 17, 31, 32, 33, 128, 136, 255, 256, 272, 320, 383, 384, 400, 1_134, 4_096,
     65_537],
)  # fmt: skip
def test_crc32_at_block_edges_is_zlibs(length: int) -> None:
    data = bytes(range(256)) * (length // 256 + 1)
    assert compiled.crc32(data[:length]) == zlib.crc32(data[:length])
    assert compiled.crc32(b"\xff" * length, 0xFFFFFFFF) == zlib.crc32(b"\xff" * length, 0xFFFFFFFF)


def test_crc32_refuses_what_is_not_bytes_like() -> None:
    with pytest.raises(TypeError, match="data must be bytes-like, not str"):
        compiled.crc32("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="1 or 2 arguments"):
        compiled.crc32()  # type: ignore[call-arg]


def test_the_machine_with_the_instruction_uses_it() -> None:
    """Where the CPU has PCLMULQDQ (x86-64), the seal folds with it, not zlib's loop, and
    512 bits at a time where it also has VPCLMULQDQ and AVX-512."""
    flags = _cpu_flags()
    if "pclmulqdq" not in flags:
        pytest.skip("this CPU has no carry-less multiply")
    wide = {"vpclmulqdq", "avx512f", "avx512vl"} <= flags
    assert ("vpclmul" if wide else "pclmul") == compiled.IMPLEMENTATION


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
