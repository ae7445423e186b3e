"""Settings of the online lane: the OpenAI-compatible endpoint that `embedstream run` (beside
Kafka) and `embedstream serve` (alone) answer on, its callers' keys and limits, and where
embedstream's own commands find one."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, setting

_ON = Group.ONLINE
_HOUR_S = 3600.0


@dataclass(frozen=True)
class OnlineFields:
    http_host: str = setting(
        "127.0.0.1",
        "Address of the online lane's endpoint (POST /v1/embeddings, GET /v1/models). Any "
        "other than loopback needs http_api_keys.",
        _ON,
    )
    http_port: int = setting(
        0,
        "Port of the online lane's endpoint; 0 serves none (embedstream serve: 8080).",
        _ON,
        ge=0,
        le=65535,
    )
    http_api_keys: str | None = setting(
        None,
        "Callers' keys as comma-separated name:key pairs, sent as `Authorization: Bearer "
        "<key>`; unset: no key asked (loopback only). Never logged.",
        _ON,
        secret=True,
    )
    http_api_keys_file: str | None = setting(
        None,
        "File holding http_api_keys, read again whenever it changes (keys rotate without a "
        "restart); EMBEDSTREAM_HTTP_API_KEYS_FILE, as for any secret.",
        _ON,
    )
    http_key_limits: str | None = setting(
        None,
        'JSON object of limits per key name, e.g. {"indexer": {"requests_per_s": 5, '
        '"inputs_per_s": 200}}: over them a caller gets 429.',
        _ON,
    )
    http_max_body_bytes: int = setting(
        16 * 1024 * 1024, "Largest request body of the online lane (413 above it).", _ON, gt=0
    )
    http_ssl_certfile: str | None = setting(
        None, "PEM certificate: the online lane speaks HTTPS (or terminate TLS at an ingress).", _ON
    )
    http_ssl_keyfile: str | None = setting(None, "PEM private key of http_ssl_certfile.", _ON)
    online_timeout_s: float = setting(
        10.0,
        "Deadline of an online request: 429 at once when the lane cannot answer within it, "
        "504 when it passes.",
        _ON,
        gt=0,
        le=_HOUR_S,
    )
    online_target_ms: float = setting(
        100.0,
        "The online lane's latency target: while its requests' items take longer from arrival "
        "to answer, the Kafka lanes' calls are cut to smaller sizes (grown back under half of "
        "it); 0 holds them at 1,024 inputs instead.",
        _ON,
        ge=0,
        le=_HOUR_S * 1000,
    )
