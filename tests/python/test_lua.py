# SPDX-License-Identifier: MIT
"""The Python package runs the C++ library's own scripts: src/lua expanded as
cmake/embed_lua.cmake expands it, byte for byte and SHA-1 for SHA-1, both from the source tree
and as `pip install ./python` installs them (test_install.py)."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from conftest import BUILD, REPO, build_file
from streamq import _lua

LUA = REPO / "src" / "lua"


def embedded() -> dict[str, tuple[str, str]]:
    """The scripts the C++ library embeds (build/generated/lua_scripts.cpp): name -> (source, sha1)."""
    path = build_file("STREAMQ_GENERATED_LUA", BUILD / "generated" / "lua_scripts.cpp")
    text = path.read_text(encoding="utf-8")
    entries = re.findall(r'\{"([a-z_0-9]+)", R"streamq_lua\((.*?)\)streamq_lua", "([0-9a-f]{40})"\},\n', text, re.S)
    assert entries, f"no scripts found in {path}"
    return {name: (source, sha) for name, source, sha in entries}


def test_expansion_equals_what_the_cxx_library_embeds() -> None:
    cxx = embedded()
    assert sorted(cxx) == _lua.script_names(LUA)
    for name, (source, sha) in cxx.items():
        mine = _lua.script(name)
        assert mine.source == source, name
        assert mine.sha1 == sha, name
        assert hashlib.sha1(source.encode("utf-8")).hexdigest() == sha, name


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_expansion_replaces_each_include_line_in_place(tmp_path: Path) -> None:
    lua = write(tmp_path, {"s.lua": "-- head\n-- @include lib/a.lua\nlocal x = 1\n-- @include lib/b.lua\nreturn x\n",
                           "lib/a.lua": "local a = 'a'\n", "lib/b.lua": "local b = 'b'\n"})
    assert _lua.expand(lua, "s") == "-- head\nlocal a = 'a'\nlocal x = 1\nlocal b = 'b'\nreturn x\n"


@pytest.mark.parametrize("files, message", [
    ({"s.lua": "-- @include lib/a.lua\n-- @include lib/a.lua\n", "lib/a.lua": "x\n"}, "includes lib/a.lua twice"),
    ({"s.lua": "-- @include lib/none.lua\n"}, "which does not exist"),
    ({"s.lua": "-- @include lib/a.lua\n", "lib/a.lua": "-- @include lib/b.lua\n", "lib/b.lua": "y\n"},
     "only scripts may include"),
])
def test_expansion_refuses_what_embed_lua_cmake_refuses(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(_lua.LuaIncludeError, match=message):
        _lua.expand(write(tmp_path, files), "s")


def test_the_package_has_the_projects_version() -> None:
    import streamq
    cmake = re.search(r"project\(streamq VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    pyproject = re.search(r'^version = "([0-9.]+)"', (REPO / "python" / "pyproject.toml").read_text(), re.M).group(1)
    assert streamq.__version__ == pyproject == cmake
