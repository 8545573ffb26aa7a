#!/usr/bin/env python3
"""Checks that the headers `cmake --install` installs are exactly what an engine and a plugin need.

An engine needs the loader session, the destinations of load_into and the devices; a plugin needs
the plugin ABI and the spec builders (DESIGN.md, review F8). The installed set must be those entry
headers and everything they include, transitively, and nothing else: a missing include breaks a
user's build, an extra header is an internal made public. Exit 0 when the list in
core/CMakeLists.txt (WMAP_INSTALLED_HEADERS) is that closure, 1 saying what differs.

usage: check_installed_headers.py [SOURCE_DIR]
"""
import os
import re
import sys

ENTRIES = ["loader/loader.h", "exec/destinations.h", "device/device.h", "device/device_spec.h",
           "abi/plugin_api.h", "spec/linear_spec.h", "spec/config_bounds.h"]
GENERATED = {"build_info.h"}  # configured into the build folder, installed with the rest
INCLUDE = re.compile(r'^\s*#\s*include\s+"wmap/([^"]+)"', re.M)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    include = os.path.join(root, "core", "include", "wmap")
    closure, todo = set(), list(ENTRIES)
    while todo:
        h = todo.pop()
        if h in closure:
            continue
        closure.add(h)
        if h in GENERATED:
            continue
        with open(os.path.join(include, h)) as f:
            todo += INCLUDE.findall(f.read())
    cmake = open(os.path.join(root, "core", "CMakeLists.txt")).read()
    m = re.search(r"set\(WMAP_INSTALLED_HEADERS\s+([^)]*)\)", cmake)
    if not m:
        print("check_installed_headers: no set(WMAP_INSTALLED_HEADERS ...) in core/CMakeLists.txt")
        return 1
    listed = set(m.group(1).split())
    missing, extra = sorted(closure - listed), sorted(listed - closure)
    for h in missing:
        print("check_installed_headers: %s is included by an installed header but not installed" % h)
    for h in extra:
        print("check_installed_headers: %s is installed but no engine or plugin entry header needs it" % h)
    total = len(set(os.path.relpath(os.path.join(d, n), include) for d, _, ns in os.walk(include) for n in ns))
    print("check_installed_headers: %d of %d headers installed (%d problem(s))" % (len(listed), total + len(GENERATED),
                                                                                len(missing) + len(extra)))
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
