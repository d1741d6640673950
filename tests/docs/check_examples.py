#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compiles every C++ example of the documentation: each ```cpp block of the Markdown files
and each @code ... @endcode block of the headers given.

A block with a main() is compiled as it stands. Any other block is a fragment: it is compiled
after example_prelude.hpp (which declares the user functions fragments call, and the
`producer` and `consumer` they use), as the body of a function. A fragment may open with a
paragraph of namespace-scope declarations (starting with struct, class, namespace, using,
NLOHMANN_, #include or a function declaration), ended by an empty line; that paragraph is
put before the function.

A Markdown page may have no block (most pages of docs/ have none), but the check must not pass
by finding nothing, so it exits non-zero when a block does not compile, and also when
- the Markdown files given have no block between them, or one named README.md has none;
- a Markdown file opens a fence this check does not read but whose language is C++ (```C++,
  ``` cpp {.numberLines}, ~~~cpp, ...): a change of fence syntax fails loudly instead of
  silently dropping the page's examples;
- none of the headers given has an @code block.

With --expect-failures N it exits zero only when exactly N blocks fail (the test of the check
itself: a fixture with good and broken blocks).

usage: check_examples.py --cxx g++ [--flag F]... [-I DIR]... --prelude P --out DIR
                         [--expect-failures N] FILE...
"""
import argparse
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

DECLARATION = re.compile(r"^(struct|class|namespace|using|NLOHMANN_|#include|template\b|"
                         r"(void|int|bool|std::\w+|auto)\s+\w+\s*\(.*\)\s*;)")


# A fence opener and its info string's first word: ```lang, ~~~lang, ```` lang {attrs} ...
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`{]*)")
CXX_LANGUAGES = {"cpp", "c++", "cxx", "cc", "hpp", "hxx", "h++"}


def markdown_blocks(path, text):
    blocks, current, start = [], None, 0
    fence = None  # the opener of a non-C++ fenced block we are in (its lines are not read)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        if current is None and re.fullmatch(r"```\s*(cpp|c\+\+)\s*", stripped):
            current, start = [], number + 1
        elif current is None and (opener := FENCE.match(stripped)):
            if opener.group(2).lower().lstrip(".") in CXX_LANGUAGES:
                sys.exit(f"{path}:{number}: a C++ block this check does not read: {stripped!r} "
                         "(write ```cpp)")
            fence = opener.group(1)
        elif current is not None and stripped == "```":
            blocks.append((path, start, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        sys.exit(f"{path}:{start}: unterminated ```cpp block")
    return blocks


def header_blocks(path, text):
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        comment = re.match(r"^\s*///(.*)$", line)
        body = comment.group(1) if comment else None
        if current is None and body is not None and body.strip() == "@code":
            current, start = [], number + 1
        elif current is not None and (body is None or body.strip() == "@endcode"):
            if body is None:
                sys.exit(f"{path}:{start}: @code block without @endcode")
            blocks.append((path, start, textwrap.dedent("\n".join(current))))
            current = None
        elif current is not None:
            current.append(body)
    return blocks


def translation_unit(path, line, code, prelude):
    if re.search(r"\bint\s+main\s*\(", code):
        return f'#line {line} "{path}"\n{code}\n'
    lines = code.split("\n")
    hoisted, body_start = [], 0
    if lines and DECLARATION.match(lines[0].strip()):
        end = next((i for i, l in enumerate(lines) if not l.strip()), len(lines))
        hoisted, body_start = lines[:end], end
    body = "\n".join(lines[body_start:])
    return (f'#include "{prelude}"\n'
            f'#line {line} "{path}"\n' + "\n".join(hoisted) + "\n"
            "[[maybe_unused]] static void streamq_documentation_example(\n"
            "    [[maybe_unused]] streamq::Producer& producer, [[maybe_unused]] streamq::Consumer& consumer) {\n"
            "  {\n"
            f'#line {line + body_start} "{path}"\n' + body + "\n  }\n}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--flag", action="append", default=[])
    parser.add_argument("-I", dest="includes", action="append", default=[])
    parser.add_argument("--implicit-includes", default="",
                        help="':'-separated directories the compiler searches anyway (not passed as -I)")
    parser.add_argument("--prelude", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--expect-failures", type=int, default=0)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    blocks, headers, header_blocks_found, markdown, markdown_blocks_found = [], 0, 0, 0, 0
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith(".md"):
            found = markdown_blocks(path, text)
            markdown += 1
            markdown_blocks_found += len(found)
            if not found and os.path.basename(path) == "README.md":
                sys.exit(f"{path}: no ```cpp block found")
        else:
            found = header_blocks(path, text)
            headers += 1
            header_blocks_found += len(found)
        blocks += found
    if markdown and not markdown_blocks_found:
        sys.exit("no ```cpp block found in any of the Markdown files")
    if headers and not header_blocks_found:
        sys.exit("no @code block found in any of the headers")

    # -I/usr/include would put it before the compiler's own headers and break #include_next.
    implicit = {os.path.normpath(d) for d in args.implicit_includes.split(":") if d}
    includes = list(dict.fromkeys(d for d in args.includes if os.path.normpath(d) not in implicit))
    os.makedirs(args.out, exist_ok=True)
    prelude = os.path.abspath(args.prelude)

    def compile_block(index_block):
        index, (path, line, code) = index_block
        source = os.path.join(args.out, f"example_{index}.cpp")
        with open(source, "w", encoding="utf-8") as f:
            f.write(translation_unit(os.path.abspath(path), line, code, prelude))
        command = [args.cxx, "-fsyntax-only", *args.flag, *[f"-I{d}" for d in includes], source]
        result = subprocess.run(command, capture_output=True, text=True)
        return path, line, result

    failed = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for path, line, result in pool.map(compile_block, enumerate(blocks)):
            if result.returncode == 0:
                print(f"ok     {path}:{line}")
            else:
                failed += 1
                print(f"FAILED {path}:{line}\n{result.stdout}{result.stderr}")
    print(f"{len(blocks) - failed} of {len(blocks)} examples compile")
    if args.expect_failures:
        print(f"expected {args.expect_failures} to fail")
    return 0 if failed == args.expect_failures else 1


if __name__ == "__main__":
    sys.exit(main())
