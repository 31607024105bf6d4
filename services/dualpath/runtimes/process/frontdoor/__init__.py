"""HTTP front door of the scheduler: OpenAI-compatible API over emulated turns."""

from dualpath.runtimes.process.frontdoor.agent_api import NATIVE_SESSION_BASE, NativeSessions
from dualpath.runtimes.process.frontdoor.app import RUNNER_KEY, make_app
from dualpath.runtimes.process.frontdoor.backend import (
    BackendBusy,
    BackendUnavailable,
    BadTurn,
    TurnBackend,
    TurnResult,
    TurnSpec,
)
from dualpath.runtimes.process.frontdoor.errors import ApiError
from dualpath.runtimes.process.frontdoor.sessions import PrefixSessions, block_hashes
from dualpath.runtimes.process.frontdoor.tokenizer import (
    ChatMessage,
    decode_fake,
    encode,
    encode_chat,
    render_chat,
    token_id,
)

__all__ = [
    "NATIVE_SESSION_BASE",
    "RUNNER_KEY",
    "ApiError",
    "BackendBusy",
    "BackendUnavailable",
    "BadTurn",
    "ChatMessage",
    "NativeSessions",
    "PrefixSessions",
    "TurnBackend",
    "TurnResult",
    "TurnSpec",
    "block_hashes",
    "decode_fake",
    "encode",
    "encode_chat",
    "make_app",
    "render_chat",
    "token_id",
]
