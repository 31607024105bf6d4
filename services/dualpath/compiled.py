"""`mypyc_attr` for the classes the optional native build compiles (dualpath/native/).

mypyc reads the decorator at compile time; plain Python gets a no-op, so the runtime does not
need mypy_extensions (a dev dependency). `allow_interpreted_subclasses=True` marks the classes
users and the process runtime subclass in Python (policies, the scheduler, the decode unit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["mypyc_attr"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*_args: Any, **_kwargs: Any) -> Any:
        return lambda cls: cls
