"""A range's string pairs decoded in one C call (iqstate-speedups) are the pairs the Python
pass decodes, and what it cannot decode it refuses, so the caller decodes pair by pair."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate.layers.metered import _utf8_pairs_in_python

pairs_module = pytest.importorskip(
    "iqstate_speedups.pairs", reason="iqstate-speedups is not built here (no C compiler)"
)
decode_utf8_pairs = pairs_module.decode_utf8_pairs

texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]))


@given(st.lists(st.tuples(texts, texts), max_size=50))
def test_the_compiled_pass_gives_the_python_pass_strings(pairs: list[tuple[str, str]]) -> None:
    encoded = [(key.encode(), value.encode()) for key, value in pairs]
    assert decode_utf8_pairs(encoded) == _utf8_pairs_in_python(encoded) == pairs


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(UnicodeDecodeError):
        decode_utf8_pairs([(b"k1", b"v"), (b"k2", b"\xff\xfe")])
    with pytest.raises(UnicodeDecodeError):
        decode_utf8_pairs([(b"\xc3", b"v")])  # a sequence cut short


@pytest.mark.parametrize(
    "bad",
    [
        ((b"k", b"v"),),  # not a list
        [[b"k", b"v"]],  # a pair that is not a tuple
        [(b"k", b"v", b"x")],  # not two items
        [(b"k", "v")],  # a str, not bytes
        [(b"k", None)],
    ],
)
def test_anything_but_a_list_of_pairs_of_bytes_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        decode_utf8_pairs(bad)


def test_bytes_subclasses_and_empty_values_decode() -> None:
    class Raw(bytes):
        pass

    assert decode_utf8_pairs([(Raw(b"k"), b""), (b"", Raw("\u00e9".encode()))]) == [
        ("k", ""),
        ("", "\u00e9"),
    ]
