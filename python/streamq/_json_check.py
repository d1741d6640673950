# SPDX-License-Identifier: MIT
"""The payload check of the C++ producer (src/wire/json_check.cpp, check_json), ported rule for
rule: exactly one RFC 8259 value (whitespace around it allowed; no byte-order mark, nothing
after it), well-formed UTF-8 (no overlong forms, no encoded surrogates, nothing above
U+10FFFF), valid escapes (a \\u high surrogate followed by a \\u low one, no lone low one),
numbers a double can hold (as nlohmann, which the Consumer parses with, reads them), and
containers nested at most ``max_depth`` deep."""
from __future__ import annotations

import math
from enum import Enum

_WHITESPACE = b" \t\n\r"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = b'"\\/bfnrt'


class JsonCheck(Enum):
    OK = "ok"
    INVALID = "invalid"
    TOO_DEEP = "too_deep"


class _Invalid(Exception):
    pass


class _Scanner:
    def __init__(self, s: bytes) -> None:
        self.s = s
        self.i = 0

    def whitespace(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WHITESPACE:
            self.i += 1

    def at_end(self) -> bool:
        return self.i >= len(self.s)

    def peek(self) -> int:
        return self.s[self.i]

    def take(self, c: bytes) -> bool:
        if self.s[self.i:self.i + 1] == c:
            self.i += 1
            return True
        return False

    def need(self, ok: bool) -> None:
        if not ok:
            raise _Invalid()

    def literal(self, word: bytes) -> None:
        self.need(self.s.startswith(word, self.i))
        self.i += len(word)

    def digits(self) -> bool:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] in _DIGITS:
            self.i += 1
        return self.i > start

    def number(self) -> None:
        start = self.i
        self.take(b"-")
        if not self.take(b"0"):  # a leading zero stands alone
            self.need(self.digits())
        real = False
        if self.take(b"."):
            self.need(self.digits())
            real = True
        if self.take(b"e") or self.take(b"E"):
            if not self.take(b"+"):
                self.take(b"-")
            self.need(self.digits())
            real = True
        # Numbers a double cannot hold are refused; integers longer than any 64-bit one are read
        # as doubles too.
        if real or self.i - start > 19:
            self.need(math.isfinite(float(self.s[start:self.i])))

    def string(self) -> None:
        self.need(self.take(b'"'))
        while self.i < len(self.s):
            b = self.s[self.i]
            if b == 0x22:  # '"'
                self.i += 1
                return
            if b == 0x5C:  # backslash
                self.escape()
            elif b < 0x20:  # control characters must be escaped
                raise _Invalid()
            elif b < 0x80:
                self.i += 1
            else:
                self.utf8()
        raise _Invalid()  # unterminated

    def hex4(self) -> int:
        unit = self.s[self.i:self.i + 4]
        self.need(len(unit) == 4 and all(c in _HEX for c in unit))
        self.i += 4
        return int(unit, 16)

    def escape(self) -> None:
        self.i += 1  # the backslash
        self.need(self.i < len(self.s))
        c = self.s[self.i]
        self.i += 1
        if c in _SIMPLE_ESCAPES:
            return
        self.need(c == ord("u"))
        unit = self.hex4()
        self.need(not 0xDC00 <= unit <= 0xDFFF)  # a low surrogate alone
        if 0xD800 <= unit <= 0xDBFF:  # needs its low surrogate
            self.need(self.take(b"\\") and self.take(b"u"))
            self.need(0xDC00 <= self.hex4() <= 0xDFFF)

    def continuation(self, lo: int = 0x80, hi: int = 0xBF) -> None:
        self.need(self.i < len(self.s) and lo <= self.s[self.i] <= hi)
        self.i += 1

    def utf8(self) -> None:
        """Well-formed UTF-8 as in RFC 3629 / Unicode table 3-7."""
        b = self.s[self.i]
        self.i += 1
        if 0xC2 <= b <= 0xDF:
            self.continuation()
        elif b == 0xE0:
            self.continuation(0xA0, 0xBF)
            self.continuation()
        elif 0xE1 <= b <= 0xEC or b in (0xEE, 0xEF):
            self.continuation()
            self.continuation()
        elif b == 0xED:
            self.continuation(0x80, 0x9F)
            self.continuation()
        elif b == 0xF0:
            self.continuation(0x90, 0xBF)
            self.continuation()
            self.continuation()
        elif 0xF1 <= b <= 0xF3:
            self.continuation()
            self.continuation()
            self.continuation()
        elif b == 0xF4:
            self.continuation(0x80, 0x8F)
            self.continuation()
            self.continuation()
        else:
            raise _Invalid()


def check_json(text: bytes, max_depth: int) -> JsonCheck:
    """Whether ``text`` is one JSON value the C++ producer would send (see the module)."""
    try:
        return _check(_Scanner(text), max_depth)
    except _Invalid:
        return JsonCheck.INVALID


def _check(s: _Scanner, max_depth: int) -> JsonCheck:
    open_: list[int] = []  # '{' or '[' per nesting level
    while True:
        # A value is expected here.
        s.whitespace()
        s.need(not s.at_end())
        c = s.peek()
        if c in b"{[":
            if len(open_) >= max_depth:
                return JsonCheck.TOO_DEEP
            s.i += 1
            s.whitespace()
            if not s.take(b"}" if c == ord("{") else b"]"):  # an empty container is a complete value
                open_.append(c)
                if c == ord("{"):
                    s.string()
                    s.whitespace()
                    s.need(s.take(b":"))
                continue  # the first element
        elif c == ord('"'):
            s.string()
        elif c == ord("t"):
            s.literal(b"true")
        elif c == ord("f"):
            s.literal(b"false")
        elif c == ord("n"):
            s.literal(b"null")
        elif c == ord("-") or c in _DIGITS:
            s.number()
        else:
            return JsonCheck.INVALID
        # After a value: close containers, or go on to the next element.
        while True:
            s.whitespace()
            if not open_:
                return JsonCheck.OK if s.at_end() else JsonCheck.INVALID
            s.need(not s.at_end())
            top = open_[-1]
            if s.take(b","):
                if top == ord("{"):
                    s.whitespace()
                    s.string()
                    s.whitespace()
                    s.need(s.take(b":"))
                break  # the next element's value
            s.need(s.take(b"}" if top == ord("{") else b"]"))
            open_.pop()
