#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that the library's folders include only what is below them.

src/ is a stack of layers; a file may include the public headers (streamq/...), headers of its
own folder, and headers of the layers below its own:

  0  util/        helpers that know nothing of Redis
  1  redis/       the Redis client: connections, cluster routing, sentinel, replies, scripts
                  (and the generated lua_scripts.hpp)
  2  wire/        what streamq writes to Redis: keys, task fields, records, script arguments
  2  src/*        the implementation of the public vocabulary (errors, log, tracing)
  3  producer/ consumer/ stats/ scheduler/
  4  inspector/   (reads stats)

tools/ uses the public API only: no header of src/.

Prints every include that breaks this and exits 1; exits 0 when there is none.
usage: check_layers.py REPOSITORY_ROOT
"""
import pathlib
import re
import sys

RANKS = {"util": 0, "redis": 1, "wire": 2, "": 2, "producer": 3, "consumer": 3, "stats": 3,
         "scheduler": 3, "inspector": 4}
GENERATED = {"lua_scripts.hpp": 1}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_include(name, own_folder, here):
    """The folder an include names ("" for a header at src/'s top), or None for a public one."""
    if name.startswith("streamq/"):
        return None
    if name in GENERATED:
        return name
    if "/" in name:
        return name.split("/", 1)[0]
    # A plain name: the including file's own folder when it is there, else src/'s top.
    return own_folder if (here / name).exists() else ""


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    src = root / "src"
    files = [p for p in src.rglob("*") if p.suffix in (".hpp", ".cpp")]
    if not files:
        sys.exit(f"check_layers.py: no sources under {src}")
    for path in files:
        rel = path.relative_to(src)
        folder = rel.parts[0] if len(rel.parts) > 1 else ""
        if folder not in RANKS:
            problems.append(f"src/{rel}: folder {folder}/ has no layer (add it to RANKS)")
            continue
        for name in INCLUDE.findall(path.read_text()):
            target = layer_of_include(name, folder, path.parent)
            if target is None or target == folder:
                continue
            rank = GENERATED.get(target, RANKS.get(target))
            if rank is None:
                problems.append(f"src/{rel}: includes \"{name}\", of no known layer")
            elif rank > RANKS[folder] or (rank == RANKS[folder] and target not in GENERATED):
                where = f"{folder}/" if folder else "src/"
                problems.append(f"src/{rel}: includes \"{name}\": {where} may not depend on "
                                f"{target}/ (a layer {'above' if rank > RANKS[folder] else 'beside'} it)")
    for path in (root / "tools").rglob("*"):
        if path.suffix not in (".hpp", ".cpp"):
            continue
        for name in INCLUDE.findall(path.read_text()):
            if name.startswith("streamq/") or (path.parent / name).exists() or \
                    any((p / name).exists() for p in path.parents if root / "tools" in p.parents or p == root / "tools"):
                continue
            problems.append(f"{path.relative_to(root)}: includes \"{name}\": tools/ use the public API only")
    for p in sorted(problems):
        print(p)
    print(f"check_layers.py: {len(files)} files of src/, {len(problems)} includes out of place")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
