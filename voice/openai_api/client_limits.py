"""Per-client budgets of the OpenAI-compatible API: how many requests one client may have in
flight and how many tokens it may ask for per minute, counted before any work is done.

    limits = ClientLimits(max_concurrent=8, tokens_per_minute=600_000)
    lease = enter(limits, request, state)   # before the body is read: 429 past its concurrency
    cost = prompt_cost(engine, messages)    # off the loop, with the parse: 400 past the cap
    charge(lease, engine, params, cost)     # 429 past its token budget
    try: ... finally: lease.release()

A client is its bearer key when the server has API keys (one key, one client, from any
address), else its peer address (uvicorn's; `X-Forwarded-For` counts only where the server was
told to trust a proxy). A request's cost is what it asks of the engine: `max_tokens` (at most
the engine's max_seq_len) plus its prompt's characters / 4 (engine.requests.prompt_chars: every
part of every message).
Tokens refill continuously at tokens_per_minute / 60 per second up to one minute's worth; a
request costing more than a minute's worth is charged one minute's worth (it may run when the
bucket is full). Refusals are 429 `rate_limit_exceeded`, naming the limit, with Retry-After.
0 turns a limit off. Memory: one small entry per client seen recently; idle, refilled entries
are dropped once more than MAX_CLIENTS are held.

Knows nothing about routes or the engine.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diffvoice.engine.requests import MESSAGE_CHARS, prompt_chars
from diffvoice.voice.openai_api.request import OpenAIError

MAX_CLIENTS = 4096
API_PRIORITY = 1  # the engine's priority for /v1 requests (0: live calls; engine.scheduler)


def client_key(scope_client: tuple | None, authorization: str | None,
               api_keys: tuple[str, ...]) -> str:
    """`key:<digest>` for a bearer key (when the server has keys), else `ip:<address>`."""
    if api_keys and authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token:
            return "key:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    host = scope_client[0] if scope_client else "unknown"
    return f"ip:{host}"


@dataclass
class _Client:
    in_flight: int
    tokens: float
    at: float


class Lease:
    """One admitted request's hold on its client's concurrency; release() once (idempotent)."""

    def __init__(self, limits: ClientLimits | None, key: str) -> None:
        self._limits, self._key = limits, key
        self.key = key  # the client, for the engine's fair shares

    def release(self) -> None:
        limits, self._limits = self._limits, None
        if limits is not None:
            limits._release(self._key)


class ClientLimits:
    def __init__(self, max_concurrent: int, tokens_per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_concurrent = max_concurrent
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._clients: dict[str, _Client] = {}
        self.refused = {"concurrency": 0, "tokens": 0}

    def _client(self, key: str, now: float) -> _Client:
        client = self._clients.get(key)
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._prune(now)
            client = self._clients[key] = _Client(0, float(self.tokens_per_minute), now)
        elif self.tokens_per_minute:
            rate = self.tokens_per_minute / 60.0
            client.tokens = min(float(self.tokens_per_minute),
                                client.tokens + (now - client.at) * rate)
            client.at = now
        return client

    def _prune(self, now: float) -> None:
        rate = self.tokens_per_minute / 60.0
        for key, c in list(self._clients.items()):
            full = not self.tokens_per_minute or c.tokens + (now - c.at) * rate \
                >= self.tokens_per_minute
            if c.in_flight == 0 and full:
                del self._clients[key]

    def admit(self, key: str, cost: int) -> Lease:
        """Take one concurrency place and `cost` tokens for `key`, or raise OpenAIError 429."""
        lease = self.enter(key)
        try:
            self.charge(key, cost)
        except OpenAIError:
            lease.release()
            raise
        return lease

    def enter(self, key: str) -> Lease:
        """Take one concurrency place for `key` (before the request is even read), or 429."""
        client = self._client(key, self._clock())
        if self.max_concurrent and client.in_flight >= self.max_concurrent:
            self.refused["concurrency"] += 1
            raise OpenAIError(
                429, f"Too many concurrent requests from this client: {client.in_flight} in "
                f"flight (api_client_concurrency={self.max_concurrent}); retry when one ends.",
                type="rate_limit_error", code="rate_limit_exceeded")
        client.in_flight += 1
        return Lease(self, key)

    def charge(self, key: str, cost: int) -> None:
        """Take `cost` tokens from `key`'s budget, or raise OpenAIError 429 (nothing taken)."""
        client = self._client(key, self._clock())
        if self.tokens_per_minute:
            charge = min(float(max(cost, 1)), float(self.tokens_per_minute))
            if client.tokens < charge:
                wait_s = (charge - client.tokens) / (self.tokens_per_minute / 60.0)
                self.refused["tokens"] += 1
                raise OpenAIError(
                    429, f"This client's token budget is spent: the request asks for {cost} "
                    f"tokens (max_tokens + prompt characters / 4), {int(client.tokens)} are "
                    f"left (api_client_tokens_per_min={self.tokens_per_minute}); retry in "
                    f"{math.ceil(wait_s)} s.", type="rate_limit_error",
                    code="rate_limit_exceeded", retry_after_s=math.ceil(wait_s))
            client.tokens -= charge

    def _release(self, key: str) -> None:
        client = self._clients.get(key)
        if client is not None and client.in_flight > 0:
            client.in_flight -= 1

    def in_flight(self, key: str) -> int:
        client = self._clients.get(key)
        return client.in_flight if client else 0



def enter(limits: ClientLimits, request: Any, state: Any) -> Lease:
    """A request's place among its client's concurrent requests (429 past it), taken before
    its body is read: its client is its API key, else its address."""
    keys = tuple(getattr(state.config, "api_keys", None) or ())
    return limits.enter(client_key(request.scope.get("client"),
                                   request.headers.get("authorization"), keys))


def prompt_cost(engine: Any, prompt: Any) -> int:
    """A request's prompt cost (engine.requests.prompt_chars: every part of every message),
    or OpenAIError 400 past the engine's max_prompt_chars, said before the agent's rules or the
    template see it. Linear in the request: run it where the request is parsed, off the loop."""
    cost = prompt_chars(prompt)
    most = getattr(getattr(engine, "config", None), "max_prompt_chars", None)
    if isinstance(most, int) and cost > most:
        raise OpenAIError(400, f"The prompt costs {cost} characters (every part of every "
                          f"message counts, {MESSAGE_CHARS} per message); the limit is "
                          f"{most} (max_prompt_chars).", param="messages",
                          code="context_length_exceeded")
    return cost


def charge(lease: Lease, engine: Any, params: Any, cost: int) -> None:
    """Charge the request's tokens to its client's budget (429 past it): max_tokens (at most
    what the engine could ever give: its max_seq_len) + the prompt's cost / 4."""
    tokens = int(getattr(params, "max_new_tokens", 0) or 0)
    longest = getattr(engine, "max_seq_len", None)
    if isinstance(longest, int):
        tokens = min(tokens, longest)
    if lease._limits is not None:
        lease._limits.charge(lease.key, tokens + cost // 4)
