"""`LlamaServer`: a small httpx client for llama-server's HTTP API, returning pydantic records."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from . import records as r
from .errors import BytesupError, MalformedResponse, ServerHTTPError, ServerTimeout, ServerUnreachable

DEFAULT_URL = "http://127.0.0.1:8099"
# Seconds to wait for one answer. A lesson's longest request (a long prefill on a big model on a
# slow CPU) takes well under this; a hung server fails after 2 minutes instead of stalling.
DEFAULT_TIMEOUT_S = 120.0


def default_base_url() -> str:
    return os.environ.get("BYTESUP_SERVER") or DEFAULT_URL


class LlamaServer:
    """One llama-server, reached over HTTP.

    `transport` lets the runner record every exchange or replay a recorded run instead of
    talking to a server (see `bytesup.replay`).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        build: str | None = None,
    ):
        self.base_url = (base_url or default_base_url()).rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("BYTESUP_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )
        self._build: str | None = build  # named in MissingField messages; /props sets it too

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ---------------------------------------------------------------------

    def _send(self, method: str, path: str, payload: dict[str, Any] | None = None) -> httpx.Response:
        try:
            resp = self._http.request(method, path, json=payload)
        except httpx.TimeoutException:
            raise ServerTimeout(self.base_url, path, self.timeout) from None
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.base_url, type(exc).__name__) from None
        if resp.status_code >= 400:
            raise ServerHTTPError(self.base_url, method, path, resp.status_code, resp.text)
        return resp

    def request_json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        resp = self._send(method, path, payload)
        try:
            return resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise MalformedResponse(self.base_url, path, "not JSON", resp.text) from None

    def _get(self, model: type[r.R], method: str, path: str, payload: dict[str, Any] | None = None) -> r.R:
        data = self.request_json(method, path, payload)
        return r.parse(model, data, path=path, url=self.base_url, build=self._build)

    # --- endpoints ---------------------------------------------------------------------

    def health(self) -> r.Health:
        return self._get(r.Health, "GET", "/health")

    def props(self) -> r.Props:
        props = self._get(r.Props, "GET", "/props")
        self._build = props.build_info
        return props

    def completion(self, prompt: str | list[int], **settings: Any) -> r.Completion:
        """POST /completion. `settings` go into the body as given (n_predict, n_probs, seed…)."""
        return self._get(r.Completion, "POST", "/completion", {"prompt": prompt, **settings})

    def tokenize(self, content: str, with_pieces: bool = True, add_special: bool = False) -> r.Tokenized:
        body = {"content": content, "with_pieces": with_pieces, "add_special": add_special}
        return self._get(r.Tokenized, "POST", "/tokenize", body)

    def detokenize(self, tokens: list[int]) -> r.Detokenized:
        return self._get(r.Detokenized, "POST", "/detokenize", {"tokens": tokens})

    def metrics(self) -> dict[str, float]:
        """GET /metrics (needs the server's --metrics), parsed into numbers."""
        return r.parse_metrics(self._send("GET", "/metrics").text)

    def slots(self) -> list[dict[str, Any]]:
        data = self.request_json("GET", "/slots")
        if not isinstance(data, list):
            raise MalformedResponse(self.base_url, "/slots", "expected a list of slots", str(data))
        return data

    def models(self) -> r.ModelList:
        return self._get(r.ModelList, "GET", "/v1/models")

    def served_meta(self) -> dict[str, Any]:
        """llama.cpp's `meta` of the served model, or {} where the server lists none: for lessons
        that show it beside their own numbers and go on without it."""
        try:
            return self.served_model().get("meta", {})
        except BytesupError:
            return {}

    def served_model(self) -> dict[str, Any]:
        """The first model of /v1/models: its id, a short name (the file's stem) and llama.cpp's
        `meta` (n_params, size = bytes of all tensors, n_vocab, n_ctx_train…); {} when none is listed."""
        data = self.models().data
        if not data:
            return {}
        model_id = str(data[0].get("id") or "served model")
        meta = data[0].get("meta")
        return {"id": model_id, "name": model_id.rsplit("/", 1)[-1].removesuffix(".gguf"),
                "meta": meta if isinstance(meta, dict) else {}}
