from dualpath.rpc.v1 import kv_pb2 as _kv_pb2
from dualpath.rpc.v1 import node_pb2 as _node_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_KIND_UNSPECIFIED: _ClassVar[ReportKind]
    REPORT_KIND_PE_RELEASED: _ClassVar[ReportKind]
    REPORT_KIND_DONE: _ClassVar[ReportKind]
    REPORT_KIND_FAILED: _ClassVar[ReportKind]
    REPORT_KIND_PROGRESS: _ClassVar[ReportKind]
    REPORT_KIND_TIER: _ClassVar[ReportKind]
    REPORT_KIND_FORWARD: _ClassVar[ReportKind]
REPORT_KIND_UNSPECIFIED: ReportKind
REPORT_KIND_PE_RELEASED: ReportKind
REPORT_KIND_DONE: ReportKind
REPORT_KIND_FAILED: ReportKind
REPORT_KIND_PROGRESS: ReportKind
REPORT_KIND_TIER: ReportKind
REPORT_KIND_FORWARD: ReportKind

class Report(_message.Message):
    __slots__ = ("kind", "rid", "t_first", "t_second", "t_last", "message", "tokens", "chunk_tokens", "step_s", "attempt", "t_scheduled", "session", "tier_blocks", "node", "unit", "in_forward", "forward_s", "load_wait_s", "t_handed", "t_in_hbm", "t_joined", "unreachable")
    KIND_FIELD_NUMBER: _ClassVar[int]
    RID_FIELD_NUMBER: _ClassVar[int]
    T_FIRST_FIELD_NUMBER: _ClassVar[int]
    T_SECOND_FIELD_NUMBER: _ClassVar[int]
    T_LAST_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    T_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TIER_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    IN_FORWARD_FIELD_NUMBER: _ClassVar[int]
    FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    T_HANDED_FIELD_NUMBER: _ClassVar[int]
    T_IN_HBM_FIELD_NUMBER: _ClassVar[int]
    T_JOINED_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    kind: ReportKind
    rid: int
    t_first: float
    t_second: float
    t_last: float
    message: str
    tokens: int
    chunk_tokens: int
    step_s: float
    attempt: int
    t_scheduled: float
    session: int
    tier_blocks: int
    node: str
    unit: str
    in_forward: bool
    forward_s: float
    load_wait_s: float
    t_handed: float
    t_in_hbm: float
    t_joined: float
    unreachable: str
    def __init__(self, kind: _Optional[_Union[ReportKind, str]] = ..., rid: _Optional[int] = ..., t_first: _Optional[float] = ..., t_second: _Optional[float] = ..., t_last: _Optional[float] = ..., message: _Optional[str] = ..., tokens: _Optional[int] = ..., chunk_tokens: _Optional[int] = ..., step_s: _Optional[float] = ..., attempt: _Optional[int] = ..., t_scheduled: _Optional[float] = ..., session: _Optional[int] = ..., tier_blocks: _Optional[int] = ..., node: _Optional[str] = ..., unit: _Optional[str] = ..., in_forward: _Optional[bool] = ..., forward_s: _Optional[float] = ..., load_wait_s: _Optional[float] = ..., t_handed: _Optional[float] = ..., t_in_hbm: _Optional[float] = ..., t_joined: _Optional[float] = ..., unreachable: _Optional[str] = ...) -> None: ...

class ReportBatch(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[Report]
    def __init__(self, reports: _Optional[_Iterable[_Union[Report, _Mapping]]] = ...) -> None: ...
