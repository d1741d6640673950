# SPDX-License-Identifier: MIT
"""The package's build backend (PEP 517, named by pyproject.toml's ``backend-path``).

It needs nothing but Python's standard library, so ``pip install ./python`` works offline: pip
builds a package in an isolated environment into which it installs the backend's requirements
from the index, and this backend has none. (setuptools would have to be fetched: Debian's
python3-setuptools is not seen from the isolated environment.)

A wheel of the package is its modules as they are, plus the Lua scripts of the repository's
``src/lua`` with their ``-- @include`` lines expanded (``streamq/_lua.py``, the rules of
cmake/embed_lua.cmake) into ``streamq/lua/``: src/lua stays the only copy anyone edits. An
sdist carries the expanded scripts, so a wheel builds from it without the repository.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PACKAGE = "streamq"
TAG = "py3-none-any"


def _project() -> dict[str, object]:
    with open(HERE / "pyproject.toml", "rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _lua_module() -> ModuleType:
    # streamq/_lua.py, loaded without importing the package (redis may not be installed yet).
    spec = importlib.util.spec_from_file_location("_streamq_build_lua", HERE / PACKAGE / "_lua.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module


def _lua_scripts() -> dict[str, bytes]:
    """``lua/<name>.lua`` -> expanded text: from the repository's src/lua, or as an sdist
    carries them."""
    shipped = HERE / PACKAGE / "lua"
    if shipped.is_dir() and not (HERE.parent / "src" / "lua").is_dir():
        return {f"lua/{p.name}": p.read_bytes() for p in sorted(shipped.glob("*.lua"))}
    source = HERE.parent / "src" / "lua"
    if not (source / "enqueue.lua").is_file():
        raise SystemExit(f"streamq: build from the repository (python/ beside src/lua): no Lua scripts in "
                         f"{source}")
    lua = _lua_module()
    return {f"lua/{name}.lua": lua.expand(source, name).encode("utf-8", "surrogateescape")
            for name in lua.script_names(source)}


def _package_files() -> dict[str, bytes]:
    """Path in the wheel (``streamq/...``) -> bytes."""
    files = {f"{PACKAGE}/{p.name}": p.read_bytes()
             for p in sorted((HERE / PACKAGE).iterdir()) if p.is_file() and p.suffix in (".py", ".typed")}
    files.update({f"{PACKAGE}/{name}": text for name, text in _lua_scripts().items()})
    return files


def _metadata(project: dict[str, object]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project['description']}", f"License: {project['license']['text']}",  # type: ignore[index]
             f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]  # type: ignore[attr-defined]
    lines += ["Description-Content-Type: text/markdown", "", (HERE / str(project["readme"])).read_text("utf-8")]
    return "\n".join(lines).encode("utf-8")


def _dist_info(project: dict[str, object]) -> str:
    return f"{project['name']}-{project['version']}.dist-info"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, files: dict[str, bytes]) -> str:
    project = _project()
    info = _dist_info(project)
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata(project)
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: streamq_build\nRoot-Is-Purelib: true\n"
                              f"Tag: {TAG}\n").encode("ascii")
    record = [_record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode("utf-8")
    name = f"{project['name']}-{project['version']}-{TAG}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            wheel.writestr(zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    return name


# The PEP 517 and PEP 660 hooks.

def get_requires_for_build_wheel(config_settings: object = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: object = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: object = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: object = None, metadata_directory: object = None) -> str:
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory: str, config_settings: object = None, metadata_directory: object = None) -> str:
    # The source tree itself on the path: its package expands src/lua when it first needs a script.
    return _write_wheel(wheel_directory, {f"{PACKAGE}.pth": (str(HERE) + "\n").encode("utf-8")})


def build_sdist(sdist_directory: str, config_settings: object = None) -> str:
    project = _project()
    root = f"{project['name']}-{project['version']}"
    files = {name: (HERE / name).read_bytes() for name in ("pyproject.toml", "README.md", Path(__file__).name)}
    files.update(_package_files())
    files["PKG-INFO"] = _metadata(project)
    name = f"{root}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        for path, data in files.items():
            member = tarfile.TarInfo(f"{root}/{path}")
            member.size, member.mode = len(data), 0o644
            sdist.addfile(member, io.BytesIO(data))
    return name


__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel"]
