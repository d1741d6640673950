# SPDX-License-Identifier: MIT
"""The Python payload check refuses what the C++ one (src/wire/json_check.cpp, check_json)
refuses, and accepts what it accepts: RFC 8259 syntax, well-formed UTF-8 with no lone
surrogate, numbers a double can hold, the depth cap."""
from __future__ import annotations

from typing import Any

import pytest

from streamq import PayloadError
from streamq._wire import payload_text

REFUSED: list[Any] = [
    '{"x":1e400}', "-1e400", "1" * 400, '"\ud800"', '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"a\udc80"',
    {"n": 10 ** 400}, {"s": "\ud800"}, "\ufeff{}", "{} x", "01", "1.", ".5", "+1", "NaN", "Infinity", "[1,]",
    '{"a":1,}', '"\t"', "'x'", "", " ", '{"a" 1}', "[1 2]", '"\\x"', "tru", "nul", b'"\xed\xa0\x80"',
    b'"\xc0\xaf"', b'"\xf4\x90\x80\x80"', "\x00",
]
ACCEPTED: list[Any] = [
    "1e-400", "12345678901234567890", "-1234567890123456789", '"\\ud83d\\ude00"', " {} ", "[]", '{"a":[1,{"b":null}]}',
    "0", "-0.5e+3", '"é"', b'"\xf0\x9f\x98\x80"', {"n": 10 ** 19}, 1.5, [True, False, None],
]


@pytest.mark.parametrize("payload", REFUSED, ids=repr)
def test_refused_as_the_cxx_check_refuses(payload: Any) -> None:
    with pytest.raises(PayloadError):
        payload_text(payload, 1 << 20, 64)


@pytest.mark.parametrize("payload", ACCEPTED, ids=repr)
def test_accepted_as_the_cxx_check_accepts(payload: Any) -> None:
    payload_text(payload, 1 << 20, 64)


def test_the_depth_cap_counts_containers() -> None:
    payload_text("[" * 3 + "]" * 3, 100, 3)
    payload_text('{"a":{"b":[]}}', 100, 3)
    with pytest.raises(PayloadError, match="deeper than 3"):
        payload_text("[" * 4 + "]" * 4, 100, 3)
    with pytest.raises(PayloadError, match="deeper than 3"):
        payload_text([[[[1]]]], 100, 3)
