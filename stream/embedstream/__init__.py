"""embedstream: Kafka text events in, embeddings out, with adaptive batching."""
