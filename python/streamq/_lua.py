# SPDX-License-Identifier: MIT
"""The project's Lua scripts (src/lua), with their `-- @include` lines expanded exactly as
cmake/embed_lua.cmake expands them for the C++ library, so that both send the same bytes and
the same SHA-1 to EVALSHA.

An installed package holds the expanded scripts in ``streamq/lua/`` (written by the build backend's
build step from src/lua); run from the source tree (``PYTHONPATH=python``) it expands
``src/lua`` when first asked. Either way src/lua is the only copy anyone edits.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

_DIRECTIVE = re.compile(r"-- @include ([^\n]+)\n")


class LuaIncludeError(Exception):
    """A script's include cannot be expanded (the messages of cmake/embed_lua.cmake)."""


def expand(lua_dir: str | os.PathLike[str], name: str) -> str:
    """The text of ``<lua_dir>/<name>.lua`` with each ``-- @include <path>`` line replaced by
    ``<lua_dir>/<path>``, as embed_lua.cmake does: the first such line is expanded first, a
    library named twice or a library that includes another is an error."""
    base = Path(lua_dir)
    text = _read(base / (name + ".lua"))
    included: list[str] = []
    while (m := _DIRECTIVE.search(text)) is not None:
        path = m.group(1)
        if path in included:
            raise LuaIncludeError(f"{name}.lua includes {path} twice")
        library_file = base / path
        if not library_file.exists():
            raise LuaIncludeError(f"{name}.lua includes {path}, which does not exist in {base}")
        included.append(path)
        library = _read(library_file)
        if "-- @include " in library:
            raise LuaIncludeError(f"{path} includes another file; only scripts may include")
        directive = f"-- @include {path}\n"
        at = text.find(directive)
        text = text[:at] + library + text[at + len(directive):]
    return text


def _read(path: Path) -> str:
    # Bytes as they are (no newline translation): the SHA-1 is of exactly these bytes.
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def script_names(lua_dir: str | os.PathLike[str]) -> list[str]:
    """The scripts of ``lua_dir`` (its ``*.lua`` files; ``lib/`` holds the included ones)."""
    return sorted(p.stem for p in Path(lua_dir).glob("*.lua"))


def write_expanded(lua_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[str]:
    """Writes every script of ``lua_dir``, expanded, to ``out_dir/<name>.lua``; returns the names.
    (The build backend, python/streamq_build.py.)"""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = script_names(lua_dir)
    if not names:
        raise LuaIncludeError(f"no Lua scripts in {lua_dir}")
    for name in names:
        with open(out / (name + ".lua"), "w", encoding="utf-8", newline="") as f:
            f.write(expand(lua_dir, name))
    return names


@dataclass(frozen=True)
class Script:
    """One script: its name, its expanded source (what EVAL sends) and its SHA-1 (EVALSHA's)."""

    name: str
    source: str
    sha1: str


def _source_tree_lua() -> Path | None:
    # python/streamq/_lua.py -> <repo>/src/lua
    candidate = Path(__file__).resolve().parent.parent.parent / "src" / "lua"
    return candidate if (candidate / "enqueue.lua").is_file() else None


_cache: dict[str, Script] = {}


def script(name: str) -> Script:
    """The script ``name`` (e.g. ``"enqueue"``): from the installed package's ``lua/`` folder,
    else expanded from the source tree's src/lua."""
    found = _cache.get(name)
    if found is not None:
        return found
    installed = Path(__file__).resolve().parent / "lua" / (name + ".lua")
    if installed.is_file():
        source = _read(installed)
    else:
        tree = _source_tree_lua()
        if tree is None:
            raise FileNotFoundError(
                f"the Lua script {name}.lua is neither installed in the streamq package nor in a "
                "source tree's src/lua (install with `pip install ./python` from the repository)")
        source = expand(tree, name)
    found = Script(name, source, hashlib.sha1(source.encode("utf-8", "surrogateescape")).hexdigest())
    _cache[name] = found
    return found
