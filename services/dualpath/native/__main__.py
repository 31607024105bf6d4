"""`python -m dualpath.native [--force]`: compile the model into the cache, unless a build
of these very sources is there already (see the package docstring)."""

import sys

from dualpath.native import MODULES, BuildError, build, built

if __name__ == "__main__":
    where = None if "--force" in sys.argv[1:] else built()
    if where is not None:
        print(f"up to date: {where} (--force rebuilds)")
        sys.exit(0)
    try:
        where = build()
    except BuildError as e:
        sys.exit(f"dualpath.native: {e}")
    print(f"compiled {len(MODULES)} modules ({', '.join(MODULES)}) into {where}")
    print("runs with DUALPATH_NATIVE=1 use it while the package's sources are unchanged")
