#!/usr/bin/env bash
# Apache Kafka Connect, standalone, with the Debezium JDBC sink connector: for the tests of the
# chunk changelog (tests/e2e/test_connect_jdbc.py) and for trying a connector by hand.
#
#   connect.sh fetch                         gather the jars into the cache (Maven, once)
#   connect.sh standalone WORKER CONNECTOR.. fetch if needed, then run a standalone worker in
#                                            the foreground (exec: its pid is this script's)
#   connect.sh classpath                     print the classpath (after a fetch)
#
# Environment:
#   EMBEDSTREAM_CONNECT_CACHE  jar cache (default ~/.cache/embedstream/connect-4.1.1)
#   EMBEDSTREAM_CONNECT_HEAP   the JVM's -Xmx (default 512m)
#
# WORKER is a worker .properties file (bootstrap.servers, converters, listeners, the offsets
# file); each CONNECTOR a connector's .properties or .json. The worker's state (the source
# offsets file; a sink's offsets are its consumer group's, `connect-<name>`) is where WORKER
# says: give each test its own file, group names and REST port.
set -euo pipefail

readonly CONNECT_VERSION=4.1.1
readonly SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly POM="$SCRIPT_DIR/connect/pom.xml"
readonly LOG4J_CONFIG="$SCRIPT_DIR/connect/log4j2.properties"
readonly CACHE="${EMBEDSTREAM_CONNECT_CACHE:-$HOME/.cache/embedstream/connect-$CONNECT_VERSION}"
readonly LIBS="$CACHE/libs"
readonly JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
readonly HEAP="${EMBEDSTREAM_CONNECT_HEAP:-512m}"

die() { echo "connect.sh: $*" >&2; exit 1; }

# shellcheck source=ops/kafka/jars.sh
source "$(dirname "${BASH_SOURCE[0]}")/jars.sh"

fetch() { fetch_jars "$POM" "$LIBS" "Kafka Connect $CONNECT_VERSION and Debezium JDBC sink"; }

standalone() {
  (($# >= 2)) || die "usage: connect.sh standalone WORKER.properties CONNECTOR..."
  fetch
  # The connector is on the worker's classpath (no plugin.path): one connector, one cache.
  exec "$JAVA" -Xms128m -Xmx"$HEAP" -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONFIG" \
    -cp "$LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone "$@"
}

case "${1:-}" in
  fetch) fetch ;;
  standalone) shift; standalone "$@" ;;
  classpath) _jars_fetched "$POM" "$LIBS" || die "not fetched; run: connect.sh fetch"; echo "$LIBS/*" ;;
  *) echo "usage: $0 {fetch|standalone WORKER CONNECTOR...|classpath}" >&2; exit 2 ;;
esac
