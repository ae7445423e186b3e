"""Options of ``embedstream simulate`` and the configuration they make."""

from __future__ import annotations

import argparse

from embedsim.config import MODEL_BACKENDS, SimulatorConfig
from embedsim.flavors import FLAVOR_NAMES

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8700


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``embedstream simulate``; pair with :func:`config_from_args`."""
    d = SimulatorConfig()
    add = parser.add_argument
    add("--host", default=DEFAULT_HOST, help="bind address (default: %(default)s)")
    add("--port", type=int, default=DEFAULT_PORT, help="port, 0 = any free (default: %(default)s)")
    add(
        "--flavor",
        choices=FLAVOR_NAMES,
        default=d.flavor,
        help="provider to imitate: its URL shape, authentication, limits and errors",
    )
    add(
        "--served-model",
        default=None,
        metavar="NAME",
        help="tei/vllm/ollama: the one model served (vllm/ollama: 404 for others)",
    )
    add(
        "--model-backend",
        choices=MODEL_BACKENDS,
        default=d.model_backend,
        help="where vectors come from: hash (deterministic, the default) or wordllama "
        "(a real small model bundled in its wheel: pip install 'embedstream[local-model]')",
    )
    add("--base-ms", type=float, default=d.base_ms, help="latency per call in ms")
    add("--per-token-ms", type=float, default=d.per_token_ms, help="extra latency per token")
    add("--per-input-ms", type=float, default=d.per_input_ms, help="extra latency per input")
    add("--capacity", type=int, default=d.capacity, help="calls served at once; others queue")
    add("--dimensions", type=int, default=d.default_dimensions, help="default vector length")
    add("--max-dimensions", type=int, default=d.max_dimensions, help="largest `dimensions`")
    add("--rate-limit-rps", type=float, default=d.rate_limit_rps, help="429 above this; 0 = off")
    add("--rate-limit-for-s", type=float, default=d.rate_limit_for_s, help="429 all for N s")
    add("--rate-limit-rpm", type=float, default=d.rate_limit_rpm, help="announced requests/min")
    add("--rate-limit-tpm", type=float, default=d.rate_limit_tpm, help="announced tokens/min")
    add(
        "--rate-limit-burst-s",
        type=float,
        default=d.rate_limit_burst_s,
        help="seconds of refill the rpm/tpm budgets hold (60 = a minute's worth)",
    )
    add("--error-rate", type=float, default=d.error_rate, help="probability of a 500")
    add("--hang-rate", type=float, default=d.hang_rate, help="probability a call hangs")
    add("--hang-s", type=float, default=d.hang_s, help="how long a hung call hangs")
    add("--shuffle-rate", type=float, default=d.shuffle_rate, help="probability of shuffled data")
    add("--reject-texts-containing", default=None, metavar="TEXT", help="400 inputs with TEXT")
    add("--auth-key", default=None, help="require this key (Bearer, or api-key for azure)")
    add(
        "--batch-completion-s",
        type=float,
        default=d.batch_completion_s,
        help="Batch API: seconds a batch is in progress (its lines done at an even pace)",
    )
    add(
        "--batch-validating-s",
        type=float,
        default=d.batch_validating_s,
        help="Batch API: seconds a batch is validating",
    )
    add(
        "--batch-window-s",
        type=float,
        default=d.batch_window_s,
        help="Batch API: the completion window ('24h'); a batch not done by then expires",
    )
    add(
        "--batch-line-error-rate",
        type=float,
        default=d.batch_line_error_rate,
        help="Batch API: probability a line fails alone (a 500 line in the error file)",
    )
    add(
        "--batch-enqueued-tokens",
        type=int,
        default=d.batch_enqueued_tokens,
        help="Batch API: tokens a model may have enqueued; a batch above fails (0: no limit)",
    )
    add("--seed", type=int, default=d.seed, help="seed of the fault dice")


def config_from_args(ns: argparse.Namespace) -> SimulatorConfig:
    """Build the config from options added by :func:`add_cli_arguments` (ValueError if invalid)."""
    return SimulatorConfig(
        flavor=ns.flavor,
        served_model=ns.served_model,
        model_backend=ns.model_backend,
        default_dimensions=ns.dimensions,
        max_dimensions=ns.max_dimensions,
        base_ms=ns.base_ms,
        per_token_ms=ns.per_token_ms,
        per_input_ms=ns.per_input_ms,
        capacity=ns.capacity,
        rate_limit_rps=ns.rate_limit_rps,
        rate_limit_for_s=ns.rate_limit_for_s,
        rate_limit_rpm=ns.rate_limit_rpm,
        rate_limit_tpm=ns.rate_limit_tpm,
        rate_limit_burst_s=ns.rate_limit_burst_s,
        error_rate=ns.error_rate,
        hang_rate=ns.hang_rate,
        hang_s=ns.hang_s,
        shuffle_rate=ns.shuffle_rate,
        reject_texts_containing=ns.reject_texts_containing,
        auth_key=ns.auth_key,
        batch_completion_s=ns.batch_completion_s,
        batch_validating_s=ns.batch_validating_s,
        batch_window_s=ns.batch_window_s,
        batch_line_error_rate=ns.batch_line_error_rate,
        batch_enqueued_tokens=ns.batch_enqueued_tokens,
        seed=ns.seed,
    )
