"""An HTTP stub of the OpenAI Chat Completions API for agent tests, on 127.0.0.1 and a
free port: it answers `POST /v1/chat/completions` with scripted turns (tool calls, then a
final message) and records every request body, so a test drives the real Agents SDK."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Turn:
    """One model answer: tool calls (name, arguments) or, with none, the final `text`."""

    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    text: str = ""


@dataclass
class ChatStub:
    turns: list[Turn]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def tool_messages(self, request: int) -> list[dict[str, Any]]:
        """The `tool` role messages (the tools' outputs) the SDK sent in a request."""
        return [m for m in self.requests[request]["messages"] if m.get("role") == "tool"]


def _completion(turn: Turn, number: int) -> dict[str, Any]:
    if turn.tool_calls:
        calls = [
            {
                "id": f"call_{number}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(turn.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": turn.text}, "stop"
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-stub",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: ChatStub


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        stub = self.server.stub
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path != "/v1/chat/completions":
            self._reply(404, {"error": {"message": f"no {self.path} here"}})
            return
        number = len(stub.requests)
        stub.requests.append(body)
        if number >= len(stub.turns):
            self._reply(500, {"error": {"message": "the script has no more turns"}})
            return
        self._reply(200, _completion(stub.turns[number], number))

    def _reply(self, status: int, payload: object) -> None:
        encoded = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def chat_stub(turns: list[Turn]) -> Iterator[ChatStub]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.stub = ChatStub(turns, url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server.stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
