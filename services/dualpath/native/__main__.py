"""`python -m dualpath.native`: compile the model into the cache (see the package docstring)."""

import sys

from dualpath.native import MODULES, BuildError, build

if __name__ == "__main__":
    try:
        where = build()
    except BuildError as e:
        sys.exit(f"dualpath.native: {e}")
    print(f"compiled {len(MODULES)} modules ({', '.join(MODULES)}) into {where}")
    print("runs with DUALPATH_NATIVE=1 use it while these sources are unchanged")
