"""A simulated OpenAI-compatible embeddings provider for tests, demos and load experiments.

Vectors are deterministic per (model, text) — see :func:`expected_vector` — so any
consumer can check that an embedding belongs to the text it was attached to.
"""

from embedsim.model import (
    ApiError,
    EmbeddingRequest,
    Limits,
    SimulatorConfig,
    Stats,
    count_tokens,
    decode_base64,
    encode_base64,
    expected_vector,
)
from embedsim.server import (
    SimulatorServer,
    add_cli_arguments,
    config_from_args,
    serve_forever,
)

__all__ = [
    "ApiError",
    "EmbeddingRequest",
    "Limits",
    "SimulatorConfig",
    "SimulatorServer",
    "Stats",
    "add_cli_arguments",
    "config_from_args",
    "count_tokens",
    "decode_base64",
    "encode_base64",
    "expected_vector",
    "serve_forever",
]
