"""The processor's settings of Kafka, topics, security, provider, batching, limits, delivery,
cache and operations: one field each, with its group, help, range and secrecy."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import (
    CacheMode,
    CompressionType,
    Delivery,
    EncodingFormat,
    Group,
    InputLanes,
    LogFormat,
    LogLevel,
    OversizePolicy,
    ProviderProfile,
    SaslMechanism,
    SecurityProtocol,
    setting,
)

# Upper bounds of durations: beyond them a value is a typo (an extra zero or two), and some would
# break things later (a retry due centuries away has a not-before time no header can carry).
_HOUR_S = 3600.0
_DAY_MS = 86_400_000.0

_K, _T, _S, _P, _B = Group.KAFKA, Group.TOPICS, Group.SECURITY, Group.PROVIDER, Group.BATCHING
_L, _D, _C, _O = Group.LIMITS, Group.DELIVERY, Group.CACHE, Group.OPERATIONS


@dataclass(frozen=True)
class CoreFields:
    """Field order is the order of the configuration reference (docs)."""

    bootstrap_servers: str = setting(
        "127.0.0.1:9092", "Kafka bootstrap servers, comma separated.", _K
    )
    group_id: str = setting("embedstream", "Consumer group; scale out by running more members.", _K)
    client_id: str = setting("embedstream", "Kafka client id prefix (shows up in broker logs).", _K)
    session_timeout_ms: int = setting(10_000, "Consumer group session timeout.", _K, gt=0)
    heartbeat_interval_ms: int = setting(3_000, "Consumer heartbeat interval.", _K, gt=0)
    fetch_max_wait_ms: int = setting(100, "Longest a fetch waits for data on the broker.", _K, ge=0)
    max_poll_records: int = setting(1_000, "Most records one poll hands over.", _K, gt=0)
    commit_interval_ms: int = setting(500, "How often completed offsets are committed.", _K, gt=0)
    connect_timeout_s: float = setting(
        15.0, "How long start-up waits for the broker.", _K, gt=0, le=_HOUR_S
    )
    compression_type: CompressionType = setting(
        "none",
        "Compression of every record embedstream produces: none, gzip, snappy, lz4 or zstd.",
        _K,
    )

    input_lanes: InputLanes = setting(
        "all",
        "Which input topics this processor reads: all, high (the high-priority request topics "
        "only) or bulk (every other: low, retry, documents). A high and a bulk processor, "
        "each a process of its own on one provider budget (budget_url), keep the high lane's "
        "fetch, calls and commits from waiting for anything of the bulk's.",
        _T,
    )
    high_process: bool = setting(
        False,
        "embedstream run: the high lane's processor in a process of its own (input_lanes=high) "
        "beside the bulk one (input_lanes=bulk), both supervised by the one command and on "
        "its provider budget.",
        _T,
    )
    topic_prefix: str = setting(
        "embed.", "Prefix of the default topic names (embed.requests.high, ...).", _T
    )
    topic_requests_high: str | None = setting(
        None,
        "High-priority request topics, comma separated; unset: topic_prefix + requests.high.",
        _T,
    )
    topic_requests_low: str | None = setting(
        None,
        "Low-priority request topics, comma separated; unset: topic_prefix + requests.low.",
        _T,
    )
    topic_retry: str | None = setting(
        None, "Retry topic (embedstream's own); unset: topic_prefix + retry.", _T
    )
    topic_results: str | None = setting(
        None, "Results topic (embedstream's own); unset: topic_prefix + results.", _T
    )
    topic_dlq: str | None = setting(
        None, "Dead-letter topic (embedstream's own); unset: topic_prefix + dlq.", _T
    )
    topic_documents: str | None = setting(
        None,
        "Documents topic (compacted, keyed by doc_id): every live document's latest text, read "
        "by the processors as a low-lane input and by a migration's backfill from the "
        "beginning. Unset: none (a migration then has no backfill source).",
        _T,
    )
    topic_changelog: str | None = setting(
        None,
        "Chunk changelog (compacted): a record per chunk of every complete document version, "
        "keyed by chunk id, and tombstones for chunks gone; its state topic is this name + "
        "'.state'. Unset: no changelog.",
        _T,
    )

    topic_batch_jobs: str | None = setting(
        None,
        "Batch jobs topic (embedstream's own, compacted): each batch job, its records and its "
        "provider batch id; unset: topic_prefix + batch.jobs.",
        _T,
    )

    security_protocol: SecurityProtocol = setting(
        "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.", _S
    )
    sasl_mechanism: SaslMechanism = setting(
        "PLAIN", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.", _S
    )
    sasl_username: str | None = setting(None, "SASL user (PLAIN, SCRAM).", _S)
    sasl_password: str | None = setting(
        None, "SASL password (or EMBEDSTREAM_SASL_PASSWORD_FILE). Never logged.", _S, secret=True
    )
    sasl_oauth_token_file: str | None = setting(
        None, "OAUTHBEARER: file holding the current token, re-read at each login.", _S
    )
    ssl_cafile: str | None = setting(
        None,
        "PEM file of the CAs signing the broker certificates; unset: the system's.",
        _S,
    )
    ssl_certfile: str | None = setting(None, "PEM client certificate (mutual TLS).", _S)
    ssl_keyfile: str | None = setting(None, "PEM private key of ssl_certfile.", _S)
    ssl_keyfile_password: str | None = setting(
        None,
        "Password of the key (or EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE). Never logged.",
        _S,
        secret=True,
    )
    ssl_check_hostname: bool = setting(
        True, "Check that the broker certificate names the host connected to.", _S
    )

    base_url: str | None = setting(
        None,
        "OpenAI-compatible base URL (ends in /v1). Falls back to OPENAI_BASE_URL.",
        _P,
        alt_env="OPENAI_BASE_URL",
    )
    api_key: str | None = setting(
        None,
        "Provider API key (or EMBEDSTREAM_API_KEY_FILE, OPENAI_API_KEY). Never logged.",
        _P,
        secret=True,
        alt_env="OPENAI_API_KEY",
    )
    model: str = setting("text-embedding-3-small", "Model used when a request names none.", _P)
    dimensions: int | None = setting(
        None,
        "Dimensions asked when a request or document read from Kafka names none (models that "
        "shorten their vectors, e.g. text-embedding-3-*); unset: the model's own size. Part "
        "of the index generation.",
        _P,
        ge=1,
        le=16_000,
    )
    encoding_format: EncodingFormat = setting(
        "float", "Encoding used when a request names none: float or base64.", _P
    )
    request_timeout_s: float = setting(
        30.0, "Timeout of one embeddings call.", _P, gt=0, le=_HOUR_S
    )
    provider_profile: ProviderProfile = setting(
        "openai",
        "Provider preset: openai, azure, vllm, tei, ollama, dashscope or generic (see Providers).",
        _P,
    )
    allowed_models: str = setting(
        "", "Comma-separated models requests may name; empty allows any.", _P
    )
    azure_endpoint: str | None = setting(
        None, "provider_profile=azure: the resource, https://NAME.openai.azure.com.", _P
    )
    azure_deployment: str | None = setting(
        None, "provider_profile=azure: deployment to call; unset: a request's model names it.", _P
    )
    azure_api_version: str = setting(
        "2024-10-21", "provider_profile=azure: the api-version query parameter.", _P
    )
    extra_headers: str | None = setting(
        None,
        "JSON object of HTTP headers for every call (or a _FILE variable). Never logged.",
        _P,
        secret=True,
    )
    extra_body: str | None = setting(
        None, "JSON object of fields added to every request body (e.g. vLLM's options).", _P
    )

    max_batch_size: int = setting(256, "Most inputs in one call.", _B, gt=0)
    max_batch_tokens: int = setting(100_000, "Most estimated tokens in one call.", _B, gt=0)
    max_wait_ms: float = setting(
        50.0, "Longest an item waits for batch-mates under backlog.", _B, ge=0, le=60_000
    )
    scale_factor: float = setting(
        64.0,
        "Backlog depth at which the wait reaches half of max_wait_ms.",
        _B,
        gt=0,
        le=1e9,
    )
    min_low_share: float = setting(
        0.1,
        "Share of calls the low lane keeps while both lanes are backlogged.",
        _B,
        ge=0,
        lt=1,
    )

    max_input_tokens: int = setting(8_192, "Most estimated tokens in one input.", _L, gt=0)
    max_concurrency: int = setting(4, "Most embeddings calls in flight.", _L, gt=0)
    target_latency_ms: float = setting(
        0.0,
        "Above 0, the in-flight limit is adaptive (AIMD: halved on a 429, a 503 or a call "
        "slower than this, grown by one as calls go well, up to max_concurrency); 0 keeps it "
        "at max_concurrency.",
        _L,
        ge=0,
        le=_HOUR_S * 1000,
    )
    rate_limit_rpm: float = setting(
        0.0, "Most calls per minute (token bucket); 0 is unlimited.", _L, ge=0
    )
    rate_limit_tpm: float = setting(
        0.0, "Most estimated tokens per minute (token bucket); 0 is unlimited.", _L, ge=0
    )
    budget_url: str | None = setting(
        None,
        "One provider budget for the fleet: redis://[:password@]host:port/db (or rediss://, "
        "unix://), where every process and replica of the deployment shares call slots, "
        "RPM/TPM and the 429 gate (max_concurrency and the rate limits are then the fleet's, "
        "each process given the same). Unset: this process's own. Password never logged.",
        _L,
        secret=True,
    )
    max_buffered_bytes: int = setting(
        64 * 1024 * 1024,
        "Most bytes held in memory (request bytes plus about 1 KiB per item for what it costs "
        "in Python, and each result's bytes until the broker has it); above it fetching pauses. "
        "The items held follow from it: two full calls per slot (2 x max_batch_size x "
        "max_concurrency, at least 5000, at least one batch) within it at 1 KiB an item.",
        _L,
        gt=0,
    )
    max_event_bytes: int = setting(1_048_576, "Largest request event accepted.", _L, gt=0)

    delivery: Delivery = setting(
        "at_least_once",
        "at_least_once, or exactly_once (Kafka transactions; consumers read_committed).",
        _D,
    )
    drain_timeout_s: float = setting(
        30.0,
        "On a rebalance or stop, how long to finish work read before letting go of it.",
        _D,
        gt=0,
        le=_HOUR_S,
    )
    max_attempts: int = setting(5, "Attempts before an item is dead-lettered.", _D, gt=0)
    retry_backoff_base_ms: float = setting(
        500.0, "First retry delay; doubles per attempt, with jitter.", _D, gt=0, le=_DAY_MS
    )
    retry_backoff_cap_ms: float = setting(30_000.0, "Longest retry delay.", _D, gt=0, le=_DAY_MS)
    oversize_policy: OversizePolicy = setting(
        "dead_letter",
        "Input over max_input_tokens: dead_letter, or truncate (header notes it).",
        _D,
    )

    cache: CacheMode = setting(
        "memory",
        "Embedding cache: memory (in-process, bounded by cache_max_bytes), "
        "redis (shared; memory in front), or off.",
        _C,
    )
    cache_url: str | None = setting(
        None,
        "cache=redis: redis://[:password@]host:port/db, or rediss:// for TLS "
        "(or EMBEDSTREAM_CACHE_URL_FILE). Password never logged.",
        _C,
        secret=True,
    )
    cache_ttl_s: float = setting(
        7 * 24 * 3600.0, "Seconds a cached vector is kept; 0 keeps it until evicted.", _C, ge=0
    )
    cache_max_bytes: int = setting(
        64 * 1024 * 1024,
        "Most bytes the in-process tier holds: each vector (4 bytes a dimension), its key and "
        "about 280 bytes of bookkeeping. It keeps at most as many vectors as fit at 1536 "
        "dimensions (10,319 by default; W-TinyLFU: a scan does not flush it).",
        _C,
        gt=0,
    )
    cache_timeout_ms: float = setting(
        500.0,
        "cache=redis: longest a look-up may take before it counts as a miss (writes: 4x).",
        _C,
        gt=0,
    )

    metrics_host: str = setting(
        "127.0.0.1", "Address of the /metrics, /healthz, /readyz server.", _O
    )
    metrics_port: int = setting(
        9464, "Port of the metrics server; 0 disables it.", _O, ge=0, le=65535
    )
    log_level: LogLevel = setting("INFO", "DEBUG, INFO, WARNING, ERROR or CRITICAL.", _O)
    log_format: LogFormat = setting("plain", "plain or json log lines.", _O)
