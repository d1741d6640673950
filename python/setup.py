# SPDX-License-Identifier: MIT
"""Build step of the Python package: the Lua scripts of the repository's src/lua, their
`-- @include` lines expanded as cmake/embed_lua.cmake expands them, are written into the
package's streamq/lua/ folder. Metadata is in pyproject.toml."""
import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LUA_DIR = os.path.join(HERE, os.pardir, "src", "lua")


def _lua_module():
    # streamq/_lua.py itself, loaded without importing the package (redis may not be there yet).
    spec = importlib.util.spec_from_file_location("_streamq_lua", os.path.join(HERE, "streamq", "_lua.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module


class build_py_with_lua(build_py):
    """build_py, then the expanded scripts into <build>/streamq/lua/."""

    def run(self):
        super().run()
        if not os.path.isfile(os.path.join(LUA_DIR, "enqueue.lua")):
            raise SystemExit("streamq: build from the repository (python/ beside src/lua): "
                             f"no Lua scripts in {os.path.normpath(LUA_DIR)}")
        _lua_module().write_expanded(LUA_DIR, os.path.join(self.build_lib, "streamq", "lua"))


setup(cmdclass={"build_py": build_py_with_lua})
