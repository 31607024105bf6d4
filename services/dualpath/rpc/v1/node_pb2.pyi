from dualpath.rpc.v1 import kv_pb2 as _kv_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadPath(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_PATH_UNSPECIFIED: _ClassVar[ReadPath]
    READ_PATH_PE: _ClassVar[ReadPath]
    READ_PATH_DE: _ClassVar[ReadPath]
READ_PATH_UNSPECIFIED: ReadPath
READ_PATH_PE: ReadPath
READ_PATH_DE: ReadPath

class TurnRequest(_message.Message):
    __slots__ = ("rid", "session", "turn", "prompt", "gen", "arrival", "hit", "pe", "de", "path", "computed", "persisted_blocks", "hbm_bytes", "buffer_bytes", "t_pe", "t_de", "t_read_start", "t_read_done", "t_first", "lineage", "attempt")
    RID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    GEN_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_FIELD_NUMBER: _ClassVar[int]
    HIT_FIELD_NUMBER: _ClassVar[int]
    PE_FIELD_NUMBER: _ClassVar[int]
    DE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HBM_BYTES_FIELD_NUMBER: _ClassVar[int]
    BUFFER_BYTES_FIELD_NUMBER: _ClassVar[int]
    T_PE_FIELD_NUMBER: _ClassVar[int]
    T_DE_FIELD_NUMBER: _ClassVar[int]
    T_READ_START_FIELD_NUMBER: _ClassVar[int]
    T_READ_DONE_FIELD_NUMBER: _ClassVar[int]
    T_FIRST_FIELD_NUMBER: _ClassVar[int]
    LINEAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    rid: int
    session: int
    turn: int
    prompt: int
    gen: int
    arrival: float
    hit: int
    pe: str
    de: str
    path: ReadPath
    computed: int
    persisted_blocks: int
    hbm_bytes: float
    buffer_bytes: float
    t_pe: float
    t_de: float
    t_read_start: float
    t_read_done: float
    t_first: float
    lineage: _containers.RepeatedCompositeFieldContainer[_kv_pb2.Fork]
    attempt: int
    def __init__(self, rid: _Optional[int] = ..., session: _Optional[int] = ..., turn: _Optional[int] = ..., prompt: _Optional[int] = ..., gen: _Optional[int] = ..., arrival: _Optional[float] = ..., hit: _Optional[int] = ..., pe: _Optional[str] = ..., de: _Optional[str] = ..., path: _Optional[_Union[ReadPath, str]] = ..., computed: _Optional[int] = ..., persisted_blocks: _Optional[int] = ..., hbm_bytes: _Optional[float] = ..., buffer_bytes: _Optional[float] = ..., t_pe: _Optional[float] = ..., t_de: _Optional[float] = ..., t_read_start: _Optional[float] = ..., t_read_done: _Optional[float] = ..., t_first: _Optional[float] = ..., lineage: _Optional[_Iterable[_Union[_kv_pb2.Fork, _Mapping]]] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReadKvRequest(_message.Message):
    __slots__ = ("request_id", "reserve_bytes", "range", "target", "nbytes", "vl", "attempt", "tier_local", "tier_end", "tier_src")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    VL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIER_LOCAL_FIELD_NUMBER: _ClassVar[int]
    TIER_END_FIELD_NUMBER: _ClassVar[int]
    TIER_SRC_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    reserve_bytes: float
    range: _kv_pb2.BlockRange
    target: int
    nbytes: float
    vl: int
    attempt: int
    tier_local: int
    tier_end: int
    tier_src: str
    def __init__(self, request_id: _Optional[int] = ..., reserve_bytes: _Optional[float] = ..., range: _Optional[_Union[_kv_pb2.BlockRange, _Mapping]] = ..., target: _Optional[int] = ..., nbytes: _Optional[float] = ..., vl: _Optional[int] = ..., attempt: _Optional[int] = ..., tier_local: _Optional[int] = ..., tier_end: _Optional[int] = ..., tier_src: _Optional[str] = ...) -> None: ...

class ReadKvReply(_message.Message):
    __slots__ = ("blocks_verified", "error", "error_kind", "tier_local", "tier_remote", "storage_blocks")
    BLOCKS_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    TIER_LOCAL_FIELD_NUMBER: _ClassVar[int]
    TIER_REMOTE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks_verified: int
    error: str
    error_kind: str
    tier_local: int
    tier_remote: int
    storage_blocks: int
    def __init__(self, blocks_verified: _Optional[int] = ..., error: _Optional[str] = ..., error_kind: _Optional[str] = ..., tier_local: _Optional[int] = ..., tier_remote: _Optional[int] = ..., storage_blocks: _Optional[int] = ...) -> None: ...

class TierReadRequest(_message.Message):
    __slots__ = ("range",)
    RANGE_FIELD_NUMBER: _ClassVar[int]
    range: _kv_pb2.BlockRange
    def __init__(self, range: _Optional[_Union[_kv_pb2.BlockRange, _Mapping]] = ...) -> None: ...

class TierReadReply(_message.Message):
    __slots__ = ("blocks", "digest")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    digest: int
    def __init__(self, blocks: _Optional[int] = ..., digest: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "attempt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    attempt: int
    def __init__(self, request_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ("released_bytes",)
    RELEASED_BYTES_FIELD_NUMBER: _ClassVar[int]
    released_bytes: float
    def __init__(self, released_bytes: _Optional[float] = ...) -> None: ...
