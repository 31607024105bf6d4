"""`locust -f loadgen/locustfile.py --host http://127.0.0.1:8000`: the testbed's locustfile.

It lives in the package (`dualpath.loadgen.locustfile`, so it ships with every install and
`dualpath load` finds it); this file re-exports its user and shape classes, which registers
its options and event listeners. See loadgen/README.md.
"""

import locust  # noqa: F401 -- first import of the process: gevent patches the stdlib now

from dualpath.loadgen.locustfile import AgentSession, SessionShape

__all__ = ["AgentSession", "SessionShape"]
