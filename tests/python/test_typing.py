# SPDX-License-Identifier: MIT
"""The package's annotations hold: mypy --strict (python/pyproject.toml's settings) finds nothing
in the package or its build backend."""
from __future__ import annotations

import subprocess
import sys
import tempfile

from conftest import REPO


def test_the_package_type_checks_strictly() -> None:
    with tempfile.TemporaryDirectory(prefix="streamq-mypy-") as cache:
        p = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache, "streamq", "streamq_build.py"],
                           cwd=REPO / "python",
                           capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
