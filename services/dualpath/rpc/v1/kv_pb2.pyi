from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Fork(_message.Message):
    __slots__ = ("session", "parent", "at")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    session: int
    parent: int
    at: int
    def __init__(self, session: _Optional[int] = ..., parent: _Optional[int] = ..., at: _Optional[int] = ...) -> None: ...

class BlockRange(_message.Message):
    __slots__ = ("session", "start", "stop", "lineage")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    LINEAGE_FIELD_NUMBER: _ClassVar[int]
    session: int
    start: int
    stop: int
    lineage: _containers.RepeatedCompositeFieldContainer[Fork]
    def __init__(self, session: _Optional[int] = ..., start: _Optional[int] = ..., stop: _Optional[int] = ..., lineage: _Optional[_Iterable[_Union[Fork, _Mapping]]] = ...) -> None: ...

class Payload(_message.Message):
    __slots__ = ("data", "checksum")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    checksum: int
    def __init__(self, data: _Optional[bytes] = ..., checksum: _Optional[int] = ...) -> None: ...

class ChargeRequest(_message.Message):
    __slots__ = ("links", "nbytes", "vl", "payload")
    LINKS_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    VL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    links: _containers.RepeatedScalarFieldContainer[str]
    nbytes: float
    vl: int
    payload: Payload
    def __init__(self, links: _Optional[_Iterable[str]] = ..., nbytes: _Optional[float] = ..., vl: _Optional[int] = ..., payload: _Optional[_Union[Payload, _Mapping]] = ...) -> None: ...

class ChargeReply(_message.Message):
    __slots__ = ("done_at_s",)
    DONE_AT_S_FIELD_NUMBER: _ClassVar[int]
    done_at_s: float
    def __init__(self, done_at_s: _Optional[float] = ...) -> None: ...

class ReadBlocksRequest(_message.Message):
    __slots__ = ("request_id", "range", "target", "nbytes", "vl", "payload_scale")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    VL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SCALE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    range: BlockRange
    target: int
    nbytes: float
    vl: int
    payload_scale: float
    def __init__(self, request_id: _Optional[int] = ..., range: _Optional[_Union[BlockRange, _Mapping]] = ..., target: _Optional[int] = ..., nbytes: _Optional[float] = ..., vl: _Optional[int] = ..., payload_scale: _Optional[float] = ...) -> None: ...

class BlockChunk(_message.Message):
    __slots__ = ("digest", "payload", "last")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    digest: int
    payload: Payload
    last: bool
    def __init__(self, digest: _Optional[int] = ..., payload: _Optional[_Union[Payload, _Mapping]] = ..., last: _Optional[bool] = ...) -> None: ...

class WriteBlocksRequest(_message.Message):
    __slots__ = ("ranges", "digests", "nbytes", "vl", "payload")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    VL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[BlockRange]
    digests: _containers.RepeatedScalarFieldContainer[int]
    nbytes: float
    vl: int
    payload: Payload
    def __init__(self, ranges: _Optional[_Iterable[_Union[BlockRange, _Mapping]]] = ..., digests: _Optional[_Iterable[int]] = ..., nbytes: _Optional[float] = ..., vl: _Optional[int] = ..., payload: _Optional[_Union[Payload, _Mapping]] = ...) -> None: ...

class WriteBlocksReply(_message.Message):
    __slots__ = ("added", "parked")
    ADDED_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    added: int
    parked: int
    def __init__(self, added: _Optional[int] = ..., parked: _Optional[int] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("sessions", "lineage")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    LINEAGE_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedScalarFieldContainer[int]
    lineage: _containers.RepeatedCompositeFieldContainer[Fork]
    def __init__(self, sessions: _Optional[_Iterable[int]] = ..., lineage: _Optional[_Iterable[_Union[Fork, _Mapping]]] = ...) -> None: ...

class LookupReply(_message.Message):
    __slots__ = ("prefix_blocks",)
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    prefix_blocks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, prefix_blocks: _Optional[_Iterable[int]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ("msgpack",)
    MSGPACK_FIELD_NUMBER: _ClassVar[int]
    msgpack: bytes
    def __init__(self, msgpack: _Optional[bytes] = ...) -> None: ...
