"""The `wmap` console script of a pip install: runs the CLI binary shipped in the package
(wmap/bin/wmap), with the arguments and exit code unchanged."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "wmap")
    if not os.access(exe, os.X_OK):
        sys.stderr.write("wmap: %s is missing: this wmap package was not installed by pip (setup.py); "
                         "run the CLI of your build (build/bin/wmap) instead\n" % exe)
        sys.exit(2)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
