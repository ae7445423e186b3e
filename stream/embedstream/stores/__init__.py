"""Vector stores behind one small interface (:class:`VectorStore`): they turn the results
topic's records into searchable state. PostgreSQL with pgvector is the first
(:mod:`embedstream.stores.pgvector`, the only importer of the database driver)."""

from __future__ import annotations

from embedstream.stores.base import Rejected, SearchHit, VectorStore
from embedstream.stores.plan import BatchPlan, plan_batch

__all__ = ["BatchPlan", "Rejected", "SearchHit", "VectorStore", "plan_batch"]
