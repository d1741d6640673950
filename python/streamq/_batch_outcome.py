# SPDX-License-Identifier: MIT
"""What an enqueue_batch refused part-way wrote, in the words of the C++ Producer
(src/producer/batch.cpp): "wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and
wrote nothing after the first refused one"."""
from __future__ import annotations

from typing import Sequence


def _index_ranges(ids: Sequence[str], written: bool) -> tuple[int, str]:
    """How many of ``ids`` are written (or not), and their indices as ranges ("0-63, 70")."""
    count = 0
    parts: list[str] = []
    i = 0
    while i < len(ids):
        if bool(ids[i]) != written:
            i += 1
            continue
        j = i
        while j + 1 < len(ids) and bool(ids[j + 1]) == written:
            j += 1
        parts.append(str(i) if i == j else f"{i}-{j}")
        count += j - i + 1
        i = j + 1
    return count, ", ".join(parts)


def _described(count: int, text: str) -> str:
    if count == 0:
        return "0"
    return f"{count} ({'index' if count == 1 else 'indices'} {text})"


def batch_outcome(ids: Sequence[str]) -> str:
    """"wrote W of N tasks (indices ...); refused R (indices ...)[ and wrote nothing after the
    first refused one]"."""
    written, written_text = _index_ranges(ids, True)
    refused, refused_text = _index_ranges(ids, False)
    m = f"wrote {written} of {len(ids)} tasks"
    if written > 0:
        m += _described(written, written_text)[len(str(written)):]
    m += "; refused " + _described(refused, refused_text)
    if written > 0 and not any(ids[written:]):
        m += " and wrote nothing after the first refused one"
    return m


def partial_batch_message(what: str, ids: Sequence[str], server_message: str) -> str:
    """"queue full: wrote ...: <the server's message>"."""
    return f"{what}: {batch_outcome(ids)}: {server_message}"


def failed_batch_message(failure: str, ids: Sequence[str]) -> str:
    """Another error of a batch: the server's message, and what was written when anything was."""
    if not any(ids):
        return failure
    return f"{failure} (enqueue_batch {batch_outcome(ids)})"
