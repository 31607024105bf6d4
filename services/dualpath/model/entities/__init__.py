"""The entities every layer talks about, and nothing else: a request (one agent turn), the
engine and node state the scheduler sees, the read path, and the run record (`Metrics`).

Pure data with no import of the rest of dualpath, so policies, engines, the report and both
runtimes depend on these records instead of on each other (docs/architecture.md).
"""
