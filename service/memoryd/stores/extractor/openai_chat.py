"""Structured chat completions from the OpenAI API or any OpenAI-compatible server
(``POST /chat/completions`` with ``response_format`` ``json_schema``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from memoryd.stores.extractor.port import ChatMessage, ExtractorUnavailable

__all__ = ["OpenAIChatExtractor"]

# Compatible servers without authentication still get a well-formed header.
_PLACEHOLDER_KEY = "no-key"
_MAX_ERROR_CHARS = 300


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The provider's wait hint: ``retry-after-ms``, else ``retry-after`` in seconds."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            continue  # an HTTP date: no better than our own default
    return None


def _message(message: ChatMessage) -> ChatCompletionMessageParam:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    return {"role": "user", "content": message.content}


class OpenAIChatExtractor:
    """An ``openai.AsyncOpenAI`` client; at most ``max_concurrency`` requests at once.

    The client retries connection errors, timeouts, 408/409/429 and 5xx answers
    ``max_retries`` times (honouring ``retry-after``) before this adapter gives up with
    ``ExtractorUnavailable``. A caller that finds no free slot within ``timeout_s`` gets
    ``ExtractorUnavailable`` too, rather than queueing without bound.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_concurrency: int = 4,
        temperature: float | None = 0.0,
    ) -> None:
        if not model:
            raise ValueError("model must not be empty")
        if timeout_s <= 0 or max_retries < 0 or max_concurrency < 1:
            raise ValueError("timeout_s > 0, max_retries >= 0 and max_concurrency >= 1 needed")
        self._model = model
        self._timeout_s = timeout_s
        self._temperature = temperature
        self._slots = asyncio.Semaphore(max_concurrency)
        self._client = openai.AsyncOpenAI(
            api_key=api_key or _PLACEHOLDER_KEY,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
        )
        self._name = f"{model} at {self._client.base_url}"

    @property
    def name(self) -> str:
        return self._name

    async def close(self) -> None:
        await self._client.close()

    async def complete(
        self, messages: Sequence[ChatMessage], schema_name: str, schema: Mapping[str, Any]
    ) -> str:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise ExtractorUnavailable(
                f"{self._name}: every extraction slot stayed busy for {self._timeout_s:g} s",
                retry_after_s=self._timeout_s,
            ) from None
        try:
            response = await self._client.chat.completions.create(
                model=self._model,
                messages=[_message(m) for m in messages],
                response_format=ResponseFormatJSONSchema(
                    type="json_schema",
                    json_schema={"name": schema_name, "schema": dict(schema), "strict": True},
                ),
                temperature=openai.omit if self._temperature is None else self._temperature,
            )
        except openai.APITimeoutError as exc:
            raise ExtractorUnavailable(
                f"{self._name}: no answer within {self._timeout_s:g} s"
            ) from exc
        except openai.APIConnectionError as exc:
            raise ExtractorUnavailable(f"{self._name}: cannot connect: {exc}") from exc
        except openai.APIStatusError as exc:
            raise ExtractorUnavailable(
                f"{self._name} answered HTTP {exc.status_code}: {exc.message[:_MAX_ERROR_CHARS]}",
                retry_after_s=_retry_after(exc.response.headers),
                status_code=exc.status_code,
            ) from exc
        except openai.OpenAIError as exc:
            raise ExtractorUnavailable(f"{self._name}: {exc}") from exc
        finally:
            self._slots.release()
        if not response.choices:
            raise ExtractorUnavailable(f"{self._name} answered without a choice")
        message = response.choices[0].message
        # A refusal or a reply cut at max tokens is no usable JSON: the caller's parse
        # fails and it asks again, as for any malformed reply.
        return message.content or ""
