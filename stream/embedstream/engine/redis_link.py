"""The only module that imports ``redis``: one connection pool to a Redis server, with bounded
waits, Lua scripts and a subscription, for the embedding cache's shared tier
(`engine/cache_tiers.py`) and the fleet's budget store (`engine/budget_redis.py`). Imported
only when one of them is configured: a process without Redis never pays for it.

Every failure surfaces as :class:`StoreFailed` (``<redis' error class>: <message>``); the
callers answer it their own way (a cache miss, a budget on its own share). redis-py retries
once, at once, on a broken connection (a pooled one Redis closed, say by restarting), never
with a backoff: the callers' answer to a failure is not a wait.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis.asyncio as redis
    from redis.commands.core import AsyncScript


class StoreFailed(OSError):
    """Redis did not answer as asked: `<its error class>: <message>`."""


class Script:
    """A Lua script registered once, sent by its SHA (loaded again if Redis lost it)."""

    def __init__(self, script: AsyncScript, errors: type[Exception]) -> None:
        self._script = script
        self._errors = errors

    async def __call__(self, keys: Sequence[str], args: Sequence[str | int | float | bytes]) -> Any:
        try:
            return await self._script(keys=list(keys), args=list(args))
        except self._errors as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc


class RedisLink:
    def __init__(self, url: str, *, timeout_s: float, connect_timeout_s: float | None = None):
        """``timeout_s`` bounds each command's socket wait; callers bound whole operations
        themselves (an await on a busy event loop looks slow too)."""
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import RedisError

        self._errors: type[Exception] = RedisError
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=connect_timeout_s or timeout_s,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            retry_on_error=[],
            health_check_interval=0,
        )

    def script(self, source: str) -> Script:
        return Script(self._client.register_script(source), self._errors)

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        try:
            found = await self._client.mget(keys)
        except self._errors as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc
        return [value if isinstance(value, bytes) else None for value in found]

    async def messages(self, channel: str) -> AsyncIterator[bytes]:
        """The messages published on ``channel`` from now on, as they come; ends with
        StoreFailed when the connection breaks (subscribe again to go on)."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(channel)
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is not None and isinstance(message.get("data"), bytes):
                    yield message["data"]
        except self._errors as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def close(self) -> None:
        await self._client.aclose()
