"""The seam to the broker: clients and their settings, the typed Protocols the rest of kafka/ is
written against, admin and topics, preflight checks, whole-topic reads, and what aiokafka keeps
private. Nothing here knows the engine."""
