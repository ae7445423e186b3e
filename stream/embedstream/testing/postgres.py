"""A throwaway PostgreSQL with pgvector for tests: the launcher of ``embedstream.tools``
(the RAG demo starts one too), re-exported under the test kit's name."""

from embedstream.tools.local_postgres import PostgresServer, PostgresUnavailable, start_postgres

__all__ = ["PostgresServer", "PostgresUnavailable", "start_postgres"]
