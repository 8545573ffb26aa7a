#!/usr/bin/env python3
"""Checks that the core's stages form a chain with no include cycle.

The core is one folder per stage (core/CMakeLists.txt): core/include/wmap/<stage>/ and
core/src/<stage>/. A file of a stage may include headers of its own stage and of the stages
before it in ORDER, never of a later one; `abi` (the plugin ABI headers) sits between spec and
plugin. Exit 0 when that holds, 1 listing every offending include.

usage: check_stages.py [SOURCE_DIR]
"""
import os
import re
import sys

ORDER = ["util", "io", "format", "catalog", "mapping", "spec", "abi", "plan", "device", "exec",
         "plugin", "loader"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"wmap/([a-z_]+)/[^"]+"', re.M)


def stage_of(path, core):
    rel = os.path.relpath(path, core).split(os.sep)
    if rel[0] == "include" and len(rel) > 3 and rel[1] == "wmap":
        return rel[2]
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    core = os.path.join(root, "core")
    problems = []
    files = 0
    for top in ("include", "src"):
        for dirpath, _, names in os.walk(os.path.join(core, top)):
            for n in names:
                if not n.endswith((".h", ".cc", ".cu")):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                stage = stage_of(path, core)
                files += 1
                if stage not in ORDER:
                    problems.append(f"{rel}: not in a stage folder ({', '.join(ORDER)})")
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    dep = m.group(1)
                    if dep not in ORDER:
                        problems.append(f"{rel}: includes wmap/{dep}/, which is not a stage")
                    elif ORDER.index(dep) > ORDER.index(stage):
                        problems.append(f"{rel}: stage '{stage}' includes later stage '{dep}' "
                                        f"({m.group(0).strip()})")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"check_stages: {files} files, {len(problems)} problem(s); order: {' -> '.join(ORDER)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
