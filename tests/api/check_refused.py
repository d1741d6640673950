#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that misuses of the public API are refused at compile time with a message that says
what to do. Each refused/*.cpp names, in a first line `// expect: TEXT`, a piece of the
compiler's message; it must fail to compile and the message must hold TEXT. A file whose first
line is `// expect: compiles` must compile (the control: the same code, used rightly, so a
refusal is not a broken include path or flag).

usage: check_refused.py --cxx g++ [--flag F]... [-I DIR]... FILE..."""
import argparse
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("-I", dest="includes", action="append", default=[])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    failures = 0
    for path in a.files:
        with open(path, encoding="utf-8") as f:
            first = f.readline().strip()
        if not first.startswith("// expect: "):
            print(f"{path}: no '// expect: ' first line")
            failures += 1
            continue
        expect = first[len("// expect: "):]
        with tempfile.TemporaryDirectory() as out:
            cmd = [a.cxx, *a.flag, *("-I" + i for i in a.includes), "-fsyntax-only", path]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
        if expect == "compiles":
            ok = p.returncode == 0
            why = "does not compile:\n" + p.stderr[-3000:]
        else:
            ok = p.returncode != 0 and expect in p.stderr
            why = ("compiles" if p.returncode == 0 else "fails without saying \"" + expect + "\":\n" + p.stderr[-3000:])
        print(f"{path}: {'ok' if ok else why}")
        failures += 0 if ok else 1
    if failures:
        sys.exit(1)
    print(f"{len(a.files)} passed, 0 failed")


if __name__ == "__main__":
    main()
