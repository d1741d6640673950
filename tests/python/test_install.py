# SPDX-License-Identifier: MIT
"""`pip install ./python` as docs/python.md tells it: offline (no index), into a virtual
environment that sees Debian's python3-redis. The installed package holds the expanded scripts of
src/lua, reads them rather than the source tree's, and runs the page's first example against the
C++ example worker; an editable install runs from the tree. An sdist builds a wheel without the repository around it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from conftest import BUILD, REPO, build_file
from streamq import _lua
from test_docs import BLOCKS

LUA = REPO / "src" / "lua"
QUIET = dict(os.environ, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")


def source_copy(tmp_path: Path) -> Path:
    # pip builds in the tree it is given: a copy of python/ and src/lua in the same places keeps the
    # source tree as it is.
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "python", tree / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(LUA, tree / "src" / "lua")
    return tree / "python"


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert p.returncode == 0, " ".join(command) + "\n" + p.stdout + p.stderr
    return p


def test_pip_install_offline_in_a_venv_runs_the_docs_example(tmp_path: Path, server: str) -> None:
    venv = tmp_path / "venv"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)])
    python = str(venv / "bin" / "python")
    source = source_copy(tmp_path)
    run([python, "-m", "pip", "install", "--no-index", str(source)], env=QUIET)

    probe = run([python, "-c", "import streamq, streamq._lua as l; print(streamq.__file__); "
                 "print(l.script('enqueue').sha1)"], cwd=tmp_path, env=QUIET)
    where, sha = probe.stdout.split()
    installed = Path(where).parent
    assert installed.is_relative_to(venv)  # not the source tree's package
    assert sha == _lua.script("enqueue").sha1
    scripts = installed / "lua"
    assert sorted(f.stem for f in scripts.glob("*.lua")) == _lua.script_names(LUA)
    for f in scripts.glob("*.lua"):
        assert f.read_text(encoding="utf-8") == _lua.expand(LUA, f.stem), f.name

    binary = build_file("STREAMQ_EXAMPLE_WORKER", BUILD / "examples" / "streamq-worker")
    worker = subprocess.Popen([str(binary), "--url", server, "--stream", "task_queue", "--consumer", "venv-1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        example = subprocess.run([python, "-c", BLOCKS[0]], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                                 env=dict(QUIET, STREAMQ_URL=server))
    finally:
        worker.terminate()
        worker.communicate(timeout=20)
    assert example.returncode == 0, example.stdout + example.stderr
    assert example.stdout.splitlines() == ["enqueued order-12345-confirmation", "done 1 venv-1"]

    # Editable: the source tree itself, its scripts expanded from src/lua on use.
    run([python, "-m", "pip", "install", "--no-index", "-e", str(source)], env=QUIET)
    probe = run([python, "-c", "import streamq, streamq._lua as l; print(streamq.__file__); "
                 "print(l.script('enqueue').sha1)"], cwd=tmp_path, env=QUIET)
    where, sha = probe.stdout.split()
    assert Path(where).parent == source / "streamq" and sha == _lua.script("enqueue").sha1


def test_an_sdist_carries_the_scripts_and_builds_a_wheel_alone(tmp_path: Path) -> None:
    source = source_copy(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    hook = "import streamq_build, sys; print(streamq_build.build_sdist(sys.argv[1]))"
    name = run([sys.executable, "-c", hook, str(dist)], cwd=source, env=QUIET).stdout.strip()
    alone = tmp_path / "alone"
    with tarfile.open(dist / name) as sdist:
        sdist.extractall(alone)  # (our own archive)
    unpacked = alone / name.removesuffix(".tar.gz")
    assert not (unpacked.parent / "src").exists()
    run([sys.executable, "-m", "pip", "wheel", "--no-index", "--no-deps", "-w", str(dist), str(unpacked)], env=QUIET)
    wheels = list(dist.glob("streamq-*-py3-none-any.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        assert "streamq/py.typed" in names and "streamq/producer.py" in names
        for script in _lua.script_names(LUA):
            assert wheel.read(f"streamq/lua/{script}.lua").decode("utf-8") == _lua.expand(LUA, script), script
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode("utf-8")
    assert "Requires-Dist: redis>=4.3" in metadata and "Requires-Python: >=3.11" in metadata
