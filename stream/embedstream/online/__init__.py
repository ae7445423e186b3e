"""The online lane: an OpenAI-compatible `/v1/embeddings` endpoint whose callers share the
processor's provider budget as its top lane (`embedstream run` with `http_port`), or an engine
of their own without Kafka (`embedstream serve`)."""
