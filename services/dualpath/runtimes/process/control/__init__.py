"""Control plane of the process runtime: Redis as registry, block index and event log."""

from dualpath.runtimes.process.control.blockindex import BlockIndex
from dualpath.runtimes.process.control.events import EventBuffer, EventLog, run_epoch
from dualpath.runtimes.process.control.keys import ROLES, validate_run_id
from dualpath.runtimes.process.control.redis_server import (
    RedisServer,
    RedisUnavailable,
    find_redis_server,
)
from dualpath.runtimes.process.control.registry import Heartbeat, Member, Registry
from dualpath.runtimes.process.control.resilience import REDIS_ERRORS, Outage, make_client
from dualpath.runtimes.process.control.watch import MembershipWatch

__all__ = [
    "REDIS_ERRORS",
    "ROLES",
    "BlockIndex",
    "EventBuffer",
    "EventLog",
    "Heartbeat",
    "Member",
    "MembershipWatch",
    "Outage",
    "RedisServer",
    "RedisUnavailable",
    "Registry",
    "find_redis_server",
    "make_client",
    "run_epoch",
    "validate_run_id",
]
