# SPDX-License-Identifier: MIT
"""Partitioned queues (ProducerOptions::partitions): the partitions' stream names
(src/wire/keys.hpp) and the partition a task goes to (src/producer/prepare.cpp, partition_of)."""
from __future__ import annotations

import random
import threading

from .errors import ConfigError

MAX_PARTITIONS = 1024  # kMaxPartitions


def _crc16_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return table


_TABLE = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC16-XMODEM, as src/redis/cluster.cpp computes it (Redis Cluster's key slots)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) ^ _TABLE[((crc >> 8) ^ byte) & 0xFF]) & 0xFFFF
    return crc


def partition_base(stream: str) -> str:
    """The stream without '{' and '}': what a partition's hash tag is made of."""
    return stream.replace("{", "").replace("}", "")


def check_partitions(partitions: int, stream: str) -> None:
    """ConfigError unless 1 <= partitions <= 1024, and a partitioned queue's name has something
    besides braces."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be 1 to {MAX_PARTITIONS}")
    if partitions > 1 and not partition_base(stream):
        raise ConfigError(f'stream "{stream}" has nothing but braces to name its partitions')


def partition_stream(stream: str, partitions: int, i: int) -> str:
    """The stream of partition ``i``: the stream itself with one partition, else
    ``{<stream without braces>:<i>}`` (its own hash tag)."""
    if partitions <= 1:
        return stream
    return "{" + partition_base(stream) + ":" + str(i) + "}"


class Partitioner:
    """Picks a task's partition as the C++ Producer does: by its tenant, else its batch, else its
    partition key, else its unique key (CRC16 of the key, mod partitions); a task without any
    goes to the next partition in turn, starting at a random one."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._lock = threading.Lock()
        self._next = random.randrange(partitions) if partitions > 1 else 0

    def of(self, tenant: str = "", batch: str = "", partition_key: str = "", unique_key: str = "") -> int:
        if self.partitions == 1:
            return 0
        key = tenant or batch or partition_key or unique_key
        if key:
            return crc16(key.encode("utf-8", "surrogateescape")) % self.partitions
        with self._lock:
            chosen = self._next % self.partitions
            self._next += 1
        return chosen
