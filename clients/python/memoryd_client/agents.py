"""The memory tools for the OpenAI Agents SDK (`pip install memoryd-client[agents]`).

    from agents import Agent, Runner
    from memoryd_client import AsyncMemoryClient
    from memoryd_client.agents import memory_tools
    from memoryd_client.tools import MEMORY_INSTRUCTIONS

    client = AsyncMemoryClient("127.0.0.1:50051", api_key="...")
    agent = Agent(name="assistant", instructions=MEMORY_INSTRUCTIONS,
                  tools=memory_tools(client, user_id="ana"))
    result = await Runner.run(agent, "Where do I live?")

Each tool is an SDK `FunctionTool` with the strict JSON schema of
`memoryd_client.tools.function_schemas()`, and fails closed like `MemoryTools`.
"""

from __future__ import annotations

from typing import Any

from agents import FunctionTool, RunContextWrapper

from memoryd_client.aio import AsyncMemoryClient
from memoryd_client.client import MemoryClient
from memoryd_client.tools import MemoryTools, tool_specs

__all__ = ["memory_tools"]


def _tool(tools: MemoryTools, name: str, spec: dict[str, Any]) -> FunctionTool:
    async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
        return await tools.acall(name, arguments)

    return FunctionTool(
        name=name,
        description=spec["description"],
        params_json_schema=spec["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=True,
    )


def memory_tools(
    client: MemoryClient | AsyncMemoryClient, *, user_id: str, **options: Any
) -> list[FunctionTool]:
    """query_memory, remember and forget for one user (options as for `MemoryTools`)."""
    tools = MemoryTools(client, user_id=user_id, **options)
    return [_tool(tools, name, spec) for name, spec in tool_specs().items()]
