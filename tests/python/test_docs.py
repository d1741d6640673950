# SPDX-License-Identifier: MIT
"""docs/python.md: its Python blocks are Python, and its first example (the README's, in Python)
runs against the C++ example worker (examples/worker.cpp)."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from conftest import BUILD, REPO, build_file

PAGE = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```$", PAGE, re.S | re.M)


def test_every_python_block_parses() -> None:
    assert len(BLOCKS) >= 6
    for block in BLOCKS:
        ast.parse(block)


def test_the_first_example_runs_against_the_cxx_example_worker(server: str) -> None:
    binary = build_file("STREAMQ_EXAMPLE_WORKER", BUILD / "examples" / "streamq-worker")
    worker = subprocess.Popen([str(binary), "--url", server, "--stream", "task_queue", "--consumer", "docs-1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run = subprocess.run([sys.executable, "-c", BLOCKS[0]], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, STREAMQ_URL=server, PYTHONPATH=str(REPO / "python")))
    finally:
        worker.terminate()
        log, _ = worker.communicate(timeout=20)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["enqueued order-12345-confirmation", "done 1 docs-1"]
    assert "done   send_email order-12345-confirmation retry_count=0 (email to user@example.com)" in log
