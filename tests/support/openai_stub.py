"""An OpenAI-compatible server for tests, on 127.0.0.1 and a free port.

It speaks ``POST /v1/embeddings`` (deterministic vectors, ``stub_vector``) and
``POST /v1/chat/completions`` (the replies a test scripts in ``behaviour.chat_replies``,
then ``behaviour.chat_default``), and records every request, so tests can point a real
HTTP client at it::

    with running_openai_stub(dim=8) as stub:
        embedder = OpenAIEmbedder(base_url=stub.url, api_key="sk-test")
        ...
        assert stub.requests[0].body["input"] == [...]

or, when the lifetime is managed elsewhere (a fixture), ``stub = start_openai_stub()``
and ``stub.stop()``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "DEFAULT_DIM",
    "EMPTY_EXTRACTION",
    "ChatReply",
    "OpenAIStub",
    "RecordedRequest",
    "StubBehaviour",
    "running_openai_stub",
    "start_openai_stub",
    "stub_vector",
]

DEFAULT_DIM = 6


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any]


EMPTY_EXTRACTION = '{"facts": [], "entities": [], "relations": [], "summary": null}'


@dataclass
class ChatReply:
    """One answer of ``/chat/completions``: the assistant's text, or an HTTP error."""

    content: str = EMPTY_EXTRACTION
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StubBehaviour:
    """What the stub answers; tests change it before calling the embedder."""

    status: int = 200
    delay_s: float = 0.0
    reverse_order: bool = True  # answer data out of index order, as a server may
    drop_last: bool = False  # answer one embedding too few
    default_dim: int = DEFAULT_DIM  # used when the request has no "dimensions"
    requests: list[RecordedRequest] = field(default_factory=list)
    # Chat completions: these replies in order, then `chat_default` for every request.
    chat_replies: list[ChatReply] = field(default_factory=list)
    chat_default: ChatReply = field(default_factory=ChatReply)
    # An embeddings request with this text among its inputs waits until `released` is set.
    hold: str | None = None
    released: threading.Event = field(default_factory=threading.Event)
    # The most chat requests the stub was answering at one time.
    max_in_flight: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def stub_vector(text: str, dim: int) -> list[float]:
    """The stub's (unnormalised) embedding: deterministic, distinct per text."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(digest[i % len(digest)]) + 1.0 for i in range(dim)]


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: StubBehaviour


class _StubHandler(BaseHTTPRequestHandler):
    server: _StubServer

    def do_POST(self) -> None:
        behaviour = self.server.behaviour
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw)
        headers = {k.lower(): v for k, v in self.headers.items()}
        behaviour.requests.append(RecordedRequest("POST", self.path, headers, body))
        if self.path.endswith("/chat/completions"):
            self._chat(body)
            return
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if behaviour.hold is not None and behaviour.hold in body["input"]:
            behaviour.released.wait()
        if behaviour.status != 200:
            self._reply(
                behaviour.status,
                {"error": {"message": "upstream exploded", "type": "server_error"}},
                {"retry-after-ms": "1"},
            )
            return
        dim = int(body.get("dimensions", behaviour.default_dim))
        data = [
            {"object": "embedding", "index": i, "embedding": stub_vector(text, dim)}
            for i, text in enumerate(body["input"])
        ]
        if behaviour.drop_last:
            data = data[:-1]
        if behaviour.reverse_order:
            data.reverse()
        self._reply(
            200,
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def _chat(self, body: dict[str, Any]) -> None:
        behaviour = self.server.behaviour
        with behaviour.lock:
            behaviour.in_flight += 1
            behaviour.max_in_flight = max(behaviour.max_in_flight, behaviour.in_flight)
            replies = behaviour.chat_replies
            reply = replies.pop(0) if replies else behaviour.chat_default
        try:
            self._answer_chat(body, reply)
        finally:
            with behaviour.lock:
                behaviour.in_flight -= 1

    def _answer_chat(self, body: dict[str, Any], reply: ChatReply) -> None:
        behaviour = self.server.behaviour
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            error = {"error": {"message": f"stub answered {reply.status}", "type": "stub"}}
            self._reply(reply.status, error, {"retry-after-ms": "1", **reply.headers})
            return
        self._reply(
            200,
            {
                "id": f"chatcmpl-stub-{len(behaviour.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.content},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
            reply.headers,
        )

    def _reply(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        encoded = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(encoded)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (a timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


class OpenAIStub:
    """A running stub. Build it with ``start_openai_stub`` or ``running_openai_stub``."""

    def __init__(self, server: _StubServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self._stopped = False
        self.behaviour: StubBehaviour = server.behaviour
        self.port: int = int(server.server_address[1])
        self.url: str = f"http://127.0.0.1:{self.port}/v1"  # base_url for the client

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        return self.behaviour.requests

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The chat completion requests received so far, oldest first."""
        return [r for r in self.behaviour.requests if r.path.endswith("/chat/completions")]

    @property
    def dim(self) -> int:
        """Length of the returned vectors when a request does not send ``dimensions``."""
        return self.behaviour.default_dim

    @dim.setter
    def dim(self, value: int) -> None:
        self.behaviour.default_dim = value

    def embedder_settings(self, **extra: object) -> dict[str, object]:
        """The `embedder` settings of a server embedding through this stub."""
        return {
            "provider": "openai",
            "openai_base_url": self.url,
            "openai_api_key": "k",
            "openai_dimensions": self.dim,
            **extra,
        }

    def stop(self) -> None:
        """Shut the server down and free its port; safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        self._server.behaviour.released.set()  # a held request ends
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_openai_stub(dim: int = DEFAULT_DIM) -> OpenAIStub:
    """Start a stub on 127.0.0.1 and a free port; the caller must ``stop()`` it."""
    server = _StubServer(("127.0.0.1", 0), _StubHandler)  # port 0: the OS picks a free one
    server.behaviour = StubBehaviour(default_dim=dim)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    return OpenAIStub(server, thread)


@contextmanager
def running_openai_stub(dim: int = DEFAULT_DIM) -> Iterator[OpenAIStub]:
    """``start_openai_stub`` for the length of a ``with`` block."""
    stub = start_openai_stub(dim)
    try:
        yield stub
    finally:
        stub.stop()
