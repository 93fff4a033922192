"""memoryd's Python client: typed sync and asyncio clients over the generated stubs.

    from memoryd_client import MemoryClient

    with MemoryClient("127.0.0.1:50051", api_key="...") as client:
        client.add(user_id="ana", content="Prefers window seats", tier="long_term")
        hits = client.retrieve(user_id="ana", query="seat preference", top_k=5)

The generated protobuf modules are `memoryd_client.v1.memory_pb2` (messages, also as
`memoryd_client.pb`) and `memoryd_client.v1.memory_pb2_grpc` (stubs); every result keeps
its message as `.proto`. Agent tools live in `memoryd_client.tools` (function-tool JSON
schemas) and `memoryd_client.agents` (OpenAI Agents SDK); the MCP server in
`memoryd_client.mcp_server`.
"""

from memoryd_client._channel import NO_RETRY, RetryPolicy
from memoryd_client._enums import Kind, Operation, PruneStrategy, Role, Source, Tier
from memoryd_client.aio import AsyncExportStream, AsyncMemoryClient
from memoryd_client.client import DEFAULT, ExportStream, MemoryClient
from memoryd_client.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    ExportCorrupt,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    MemorydError,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from memoryd_client.results import (
    AddBatchResult,
    AddResult,
    BatchItemResult,
    DeleteResult,
    EndSessionResult,
    Episode,
    EpisodeStep,
    GetResult,
    ImportResult,
    ItemError,
    ListMemoriesResult,
    ListUsersResult,
    MemoryItem,
    PruneResult,
    Relation,
    RenderedContext,
    RetrieveResult,
    ScoreComponents,
    TierUsage,
    UsageAlert,
    UsageResult,
    UserSummary,
)
from memoryd_client.v1 import memory_pb2 as pb

__version__ = "0.1.0"

__all__ = [
    "DEFAULT",
    "NO_RETRY",
    "AddBatchResult",
    "AddResult",
    "AlreadyExists",
    "AsyncExportStream",
    "AsyncMemoryClient",
    "BatchItemResult",
    "Cancelled",
    "DeadlineExceeded",
    "DeleteResult",
    "EndSessionResult",
    "Episode",
    "EpisodeStep",
    "ExportCorrupt",
    "ExportStream",
    "FailedPrecondition",
    "FieldViolation",
    "GetResult",
    "ImportResult",
    "Internal",
    "InvalidArgument",
    "ItemError",
    "Kind",
    "ListMemoriesResult",
    "ListUsersResult",
    "MemoryClient",
    "MemoryItem",
    "MemorydError",
    "NotFound",
    "Operation",
    "PermissionDenied",
    "PruneResult",
    "PruneStrategy",
    "QuotaExceeded",
    "RateLimited",
    "Relation",
    "RenderedContext",
    "RetrieveResult",
    "RetryPolicy",
    "Role",
    "ScoreComponents",
    "Source",
    "Tier",
    "TierUsage",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UsageAlert",
    "UsageResult",
    "UserSummary",
    "pb",
]
