"""A throwaway Kafka Connect worker (standalone, a process of its own) running the Debezium JDBC
sink, for the chunk changelog's tests and benchmark: its worker properties, the sink's
configuration as docs/guides/kafka-connect.md gives it, and the table it writes into.

The worker comes from ``ops/kafka/connect.sh`` (jars from Maven Central, cached), so this
works from a checkout of the repository, not from an installed wheel.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from pathlib import Path

CONNECT_SCRIPT = Path(__file__).parents[3] / "ops" / "kafka" / "connect.sh"

# The chunk table as the sink fills it (a column per field of the changelog value), created
# ahead: an auto-created `vector` column would have no dimension and could not be indexed.
CHUNK_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    chunk_id uuid PRIMARY KEY,
    doc_id text NOT NULL,
    version text NOT NULL,
    chunk_seq int NOT NULL,
    span_start int NOT NULL,
    span_end int NOT NULL,
    model text NOT NULL,
    dimensions int NOT NULL,
    index_generation text NOT NULL,
    metadata jsonb,
    text text,
    embedding vector({dimensions}) NOT NULL
)"""


def fetch_connect(timeout_s: float = 600) -> None:
    """Gather the jars once (Maven); at once when cached."""
    subprocess.run(["bash", str(CONNECT_SCRIPT), "fetch"], check=True, timeout=timeout_s)


def worker_properties(path: Path, bootstrap: str, rest_port: int) -> Path:
    """A standalone worker's properties, its offsets file beside them."""
    path.write_text(
        f"""bootstrap.servers={bootstrap}
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=true
# Exactly-once outputs: a sink must not apply what an aborted transaction wrote.
consumer.isolation.level=read_committed
# A worker SIGKILLed mid-way leaves its sink's group member behind until its session ends: 10 s
# rather than Kafka's 45, so the restarted worker gets the partitions back within the test.
consumer.session.timeout.ms=10000
consumer.heartbeat.interval.ms=3000
offset.storage.file.filename={path.parent / "connect.offsets"}
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:{rest_port}
plugin.discovery=only_scan
"""
    )
    return path


def jdbc_sink(name: str, topic: str, port: int, table: str, dlq: str) -> dict[str, str]:
    """The Debezium JDBC sink as the guide gives it: upsert by chunk id, delete on tombstone,
    the vector into a pgvector column, failed records to a dead-letter topic."""
    return {
        "name": name,
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "connection.url": f"jdbc:postgresql://127.0.0.1:{port}/postgres",
        "connection.username": "postgres",
        "connection.password": "",
        "insert.mode": "upsert",
        "delete.enabled": "true",
        "primary.key.mode": "record_key",
        "primary.key.fields": "chunk_id",
        "schema.evolution": "none",
        "collection.name.format": table,
        # The key is the chunk id as a string; the sink's record_key mode wants a struct.
        "transforms": "chunk_id",
        "transforms.chunk_id.type": "org.apache.kafka.connect.transforms.HoistField$Key",
        "transforms.chunk_id.field": "chunk_id",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    }


class ConnectWorker:
    """A standalone worker as a process of its own, which a test may SIGKILL and start again."""

    def __init__(self, worker: Path, connector: Path, log: Path, rest_port: int) -> None:
        self._args = ["bash", str(CONNECT_SCRIPT), "standalone", str(worker), str(connector)]
        self._log = log
        self.rest = f"http://127.0.0.1:{rest_port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._log.open("ab") as out:
            self.process = subprocess.Popen(self._args, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL: connect.sh execs the JVM, so the process is the worker itself."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def put_connector(self, config: dict[str, str]) -> None:
        """Create (or reconfigure) a connector through the worker's REST API."""
        request = urllib.request.Request(
            f"{self.rest}/connectors/{config['name']}/config",
            data=json.dumps(config).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            if answer.status not in (200, 201):
                raise RuntimeError(f"Connect answered {answer.status}: {answer.read()!r}")

    def log_tail(self, chars: int = 4000) -> str:
        return self._log.read_text(errors="replace")[-chars:]
