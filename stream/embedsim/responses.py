"""aiohttp responses and routing rules of the simulator: JSON bodies, provider-shaped errors,
which route a flavor answers, and the host a URL names."""

from __future__ import annotations

import orjson
from aiohttp import web

from embedsim.errors import ApiError, not_found
from embedsim.flavors import Flavor


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_response(error: ApiError, flavor: Flavor) -> web.Response:
    body = error.body_for(flavor)
    response = (
        web.Response(status=error.status, text=body)
        if isinstance(body, str)
        else json_response(body, status=error.status)
    )
    response.headers.update(error.headers)
    return response


def route_of(request: web.Request, flavor: Flavor) -> str | None:
    """The Azure deployment a request names (None on /v1/embeddings); a 404 for the route of
    another flavor, or an Azure call without api-version, as the real servers answer."""
    deployment = request.match_info.get("deployment")
    if (deployment is not None) != (flavor.name == "azure"):
        raise not_found(f"no route {request.path} on a {flavor.name} server")
    if deployment is not None and not request.query.get("api-version"):
        raise ApiError(404, "Resource not found", error_type="invalid_request_error", code="404")
    return deployment


def url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):  # wildcard binds are reachable via loopback
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
