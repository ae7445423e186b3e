"""The simulator's error answers and its authentication, in each flavor's manner. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping

from embedsim.config import SimulatorConfig
from embedsim.flavors import Flavor, error_body


class ApiError(Exception):
    """An error response: HTTP status, message and OpenAI-style type/param/code; its body
    takes the shape of the flavor answering (:meth:`body_for`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        raw_body: object = None,  # a body of its own, whatever the flavor (e.g. vLLM's 401)
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code
        self.headers: dict[str, str] = dict(headers or {})
        self.raw_body = raw_body

    def body(self) -> dict[str, object]:
        """OpenAI's shape: ``{"error": {...}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def body_for(self, flavor: Flavor) -> object:
        if self.raw_body is not None:
            return self.raw_body
        return error_body(flavor, self.status, self.message, self.error_type, self.param, self.code)


def invalid_request(message: str, *, param: str | None, code: str | None) -> ApiError:
    return ApiError(400, message, error_type="invalid_request_error", param=param, code=code)


def unprocessable(message: str) -> ApiError:
    """TEI's answer to a request it will not take (422, e.g. too many inputs)."""
    return ApiError(422, message, error_type="invalid_request_error")


def not_found(message: str, *, code: str | None = None) -> ApiError:
    return ApiError(404, message, error_type="invalid_request_error", param="model", code=code)


def server_error() -> ApiError:
    return ApiError(
        500,
        "The server had an error while processing your request. Sorry about that!",
        error_type="server_error",
    )


def rate_limited(retry_after_s: float) -> ApiError:
    """429 carrying both retry headers the OpenAI client understands."""
    retry_after_s = max(retry_after_s, 0.001)
    return ApiError(
        429,
        f"Rate limit reached for requests. Please try again in {retry_after_s:.3f}s.",
        error_type="rate_limit_exceeded",
        code="rate_limit_exceeded",
        headers={
            "retry-after": f"{retry_after_s:.3f}",
            "retry-after-ms": str(math.ceil(retry_after_s * 1000)),
        },
    )


def check_auth(config: SimulatorConfig, authorization: str | None) -> None:
    """Raise 401 unless the Authorization header carries ``config.auth_key``."""
    if config.auth_key is None or authorization == f"Bearer {config.auth_key}":
        return
    if config.flavor == "tei":  # TEI's auth middleware answers a bare 401
        raise ApiError(401, "Unauthorized", error_type="unauthorized", raw_body="")
    if config.flavor == "vllm":
        raise ApiError(401, "Unauthorized", error_type="unauthorized",
                       raw_body={"error": "Unauthorized"})  # fmt: skip
    # Echo the key back, as careless providers and proxies do: clients must scrub it.
    presented = (authorization or "").removeprefix("Bearer ")
    raise ApiError(
        401,
        f"Incorrect API key provided: {presented}.",
        error_type="invalid_request_error",
        code="invalid_api_key",
    )


def authenticate(config: SimulatorConfig, headers: Mapping[str, str]) -> None:
    """Raise 401 unless the request authenticates as the flavor expects (when a key is set)."""
    scheme = config.flavor_rules.auth
    if scheme == "bearer":
        check_auth(config, headers.get("Authorization"))
    elif scheme == "api-key" and config.auth_key not in (None, headers.get("api-key")):
        # Azure's answer to a wrong or missing key.
        raise ApiError(
            401,
            "Access denied due to invalid subscription key or wrong API endpoint. Make "
            "sure to provide a valid key for an active subscription and use a correct "
            "regional API endpoint for your resource.",
            error_type="invalid_request_error",
            code="401",
        )
