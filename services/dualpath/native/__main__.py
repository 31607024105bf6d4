"""`python -m dualpath.native`: compile the model into the cache (see the package docstring)."""

from dualpath.native import MODULES, build

if __name__ == "__main__":
    where = build()
    print(f"compiled {len(MODULES)} modules ({', '.join(MODULES)}) into {where}")
    print("runs with DUALPATH_NATIVE=1 use it while these sources are unchanged")
