# SPDX-License-Identifier: MIT
"""docs/python.md: its Python blocks are Python, and its first example (the README's, in Python)
runs against the C++ example worker (examples/worker.cpp)."""
from __future__ import annotations

import ast
import builtins
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


def undefined_names(source: str) -> set[str]:
    """The names a block reads that nothing in it binds (imports, assignments, loop and with
    targets, definitions, parameters) and that are not built-ins: what would be a NameError."""
    tree = ast.parse(source)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound - set(dir(builtins))


def test_the_name_check_finds_an_undefined_name() -> None:
    assert undefined_names("from x import a\nb = a(c)\nfor d in b: print(d, e)") == {"c", "e"}


def test_every_python_block_is_self_contained() -> None:
    for block in BLOCKS:
        assert undefined_names(block) == set(), block


def test_the_blocks_that_do_not_wait_for_a_worker_run(server: str) -> None:
    # (In a database of their own: the first example's worker reads task_queue of database 0.)
    for block in BLOCKS[1:]:
        if ".wait(" in block:
            continue  # its tasks' handlers are the reader's: checked above by name only
        run = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, STREAMQ_URL=server + "/1", PYTHONPATH=str(REPO / "python")))
        assert run.returncode == 0, block + run.stdout + run.stderr


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
