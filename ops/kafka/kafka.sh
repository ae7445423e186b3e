#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, broker+controller in one JVM) for tests.
#
#   kafka.sh fetch    gather the broker jars into the cache (Maven, once)
#   kafka.sh start    fetch if needed, format storage once, start, wait until ready
#   kafka.sh stop     SIGTERM, then SIGKILL after 30 s
#   kafka.sh kill     SIGKILL at once (chaos tests; the data dir is kept)
#   kafka.sh status   exit 0 and print the bootstrap if running, else exit 1
#   kafka.sh log      print the broker's stdout/stderr and its INFO log
#   kafka.sh clean    stop, then delete the data dir (topics and offsets)
#
# Environment:
#   EMBEDSTREAM_KAFKA_PORT             client port (default 39092)
#   EMBEDSTREAM_KAFKA_CONTROLLER_PORT  KRaft controller port (default port+1)
#   EMBEDSTREAM_KAFKA_DIR              data dir (default $TMPDIR/embedstream-kafka-<port>)
#   EMBEDSTREAM_KAFKA_CACHE            jar cache (default ~/.cache/embedstream/kafka-4.1.1)
#   EMBEDSTREAM_KAFKA_AUTO_CREATE_TOPICS  broker auto.create.topics.enable (default false)
#   EMBEDSTREAM_KAFKA_SECURED          1: also a SASL_SSL and an SSL (mutual TLS) listener, see below
#   EMBEDSTREAM_KAFKA_SASL_SSL_PORT    SASL_SSL listener port (default port+2)
#   EMBEDSTREAM_KAFKA_SSL_PORT         SSL listener port (default port+3)
#   EMBEDSTREAM_PYTHON                 interpreter with aiokafka, for the readiness probe
#
# The secured configuration (for the TLS/SASL tests) keeps the PLAINTEXT listener for the broker's
# own traffic and the readiness probe, and adds, on loopback:
#   SASL_SSL  SCRAM-SHA-512, SCRAM-SHA-256, PLAIN and OAUTHBEARER (unsecured JWS, test only);
#             SCRAM users are created when the storage is formatted (kafka-storage --add-scram)
#   SSL       mutual TLS: the client must present a certificate signed by the test CA
# A throwaway CA, a broker certificate (SAN IP:127.0.0.1 only, so `localhost` is a hostname
# mismatch) and a client certificate with an encrypted key are generated into <data dir>/tls at
# the first start; random passwords sit next to them (mode 600). <data dir>/secured.env lists
# the addresses, files and user as key=value lines for the tests. Nothing of it is committed.
set -euo pipefail

readonly KAFKA_VERSION=4.1.1
readonly SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly POM="$SCRIPT_DIR/pom.xml"
readonly LOG4J_CONFIG="$SCRIPT_DIR/log4j2.yaml"
readonly CACHE="${EMBEDSTREAM_KAFKA_CACHE:-$HOME/.cache/embedstream/kafka-$KAFKA_VERSION}"
readonly LIBS="$CACHE/libs"
# The marker holds the pom's checksum, so editing the pom triggers a re-fetch.
readonly FETCH_MARKER="$CACHE/fetched.sha256"
readonly PORT="${EMBEDSTREAM_KAFKA_PORT:-39092}"
readonly CONTROLLER_PORT="${EMBEDSTREAM_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
# A fixed per-port default (not mktemp) so stop/status/log find it without state files.
readonly DATA_DIR="${EMBEDSTREAM_KAFKA_DIR:-${TMPDIR:-/tmp}/embedstream-kafka-$PORT}"
readonly PROPERTIES="$DATA_DIR/server.properties"
readonly PID_FILE="$DATA_DIR/broker.pid"
readonly BROKER_LOG="$DATA_DIR/broker.log"
readonly BOOTSTRAP="127.0.0.1:$PORT"
readonly JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
readonly PYTHON="${EMBEDSTREAM_PYTHON:-python3}"
readonly READY_TIMEOUT_S=60
readonly SECURED="${EMBEDSTREAM_KAFKA_SECURED:-0}"
readonly SASL_SSL_PORT="${EMBEDSTREAM_KAFKA_SASL_SSL_PORT:-$((PORT + 2))}"
readonly SSL_PORT="${EMBEDSTREAM_KAFKA_SSL_PORT:-$((PORT + 3))}"
readonly TLS_DIR="$DATA_DIR/tls"
readonly SCRAM_USER=embedstream
readonly STOP_TIMEOUT_S=30

die() { echo "kafka.sh: $*" >&2; exit 1; }

pom_checksum() { sha256sum "$POM" | cut -d' ' -f1; }

is_fetched() { [[ -f "$FETCH_MARKER" && "$(cat "$FETCH_MARKER")" == "$(pom_checksum)" ]]; }

fetch() {
  if is_fetched; then return 0; fi
  mkdir -p "$CACHE"
  # Serialise concurrent fetches (parallel CI jobs sharing a cache); the lock
  # fd closes when fetch_locked returns.
  fetch_locked 8>"$CACHE/.fetch.lock"
}

fetch_locked() {
  flock 8
  if is_fetched; then return 0; fi
  command -v mvn >/dev/null || die "mvn not on PATH; needed once to fetch the Kafka jars"
  echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION jars into $LIBS" >&2
  # Copy into a scratch dir and swap it in, so a failed download never looks complete.
  rm -rf "$LIBS.partial"
  # Output is shown only on failure: even with -q, Debian's Maven prints ANSI resets.
  local mvn_output
  if ! mvn_output="$(mvn -q -B -f "$POM" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS.partial" 2>&1)"; then
    echo "$mvn_output" >&2
    die "maven could not fetch the Kafka jars"
  fi
  rm -rf "$LIBS"
  mv "$LIBS.partial" "$LIBS"
  pom_checksum >"$FETCH_MARKER"
}

# True if pid is our live broker: its command line names our properties file, so
# a reused pid or a zombie (empty command line) does not count.
# From /proc, not `ps -o args=`: ps cuts a command line to $COLUMNS (a test setting COLUMNS for
# a terminal view hid the properties path at the end of the JVM's long command line, so stop
# and kill found "no broker" and left it running).
is_our_broker() { [[ -r "/proc/$1/cmdline" ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$PROPERTIES"; }

# Prints the pid if our broker runs (a stale pid file is ignored).
running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  is_our_broker "$pid" || return 1
  echo "$pid"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_properties() {
  local listeners="PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
  local advertised="PLAINTEXT://127.0.0.1:$PORT"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ "$SECURED" == 1 ]]; then
    listeners+=",SASL_SSL://127.0.0.1:$SASL_SSL_PORT,SSL://127.0.0.1:$SSL_PORT"
    advertised+=",SASL_SSL://127.0.0.1:$SASL_SSL_PORT,SSL://127.0.0.1:$SSL_PORT"
    protocols+=",SASL_SSL:SASL_SSL,SSL:SSL"
  fi
  cat >"$PROPERTIES" <<EOF
# Generated by ops/kafka/kafka.sh; rewritten on every start.
# KRaft combined mode: one JVM is both the broker and the only controller.
process.roles=broker,controller
node.id=1
# Loopback only: this broker is for tests; PLAINTEXT has no authentication.
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
log.dirs=$DATA_DIR/kraft-logs

# One broker, so every internal topic must accept a single replica.
default.replication.factor=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Fewer internal partitions than the default 50: faster first group join and
# first transaction on a fresh broker.
offsets.topic.num.partitions=8
transaction.state.log.num.partitions=8

# Tests join and leave consumer groups constantly; do not wait 3 s per rebalance.
group.initial.rebalance.delay.ms=0
num.partitions=1
# Off by default: production topics come from topics/topics.toml via
# embedstream.kafka.admin.create_topics, and a typo in a topic name should fail loudly
# instead of silently creating a 1-partition topic.
auto.create.topics.enable=${EMBEDSTREAM_KAFKA_AUTO_CREATE_TOPICS:-false}
# The default 128 MiB compaction buffer is wasted on a test broker.
log.cleaner.dedupe.buffer.size=33554432
EOF
  if [[ "$SECURED" == 1 ]]; then write_secured_properties; fi
}

write_secured_properties() {
  local password
  password="$(cat "$TLS_DIR/scram.password")"
  cat >>"$PROPERTIES" <<EOF

# Secured listeners (EMBEDSTREAM_KAFKA_SECURED=1). PEM keystore: key (PKCS#8) + certificate.
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SCRAM_USER="$password";
# No validator configured: Kafka's unsecured JWS validator (tokens with alg "none"), tests only.
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";
EOF
  chmod 600 "$PROPERTIES"  # it holds the PLAIN password
}

# A throwaway CA, broker and client certificates (PEM) and passwords, generated once per data
# dir. The broker key is unencrypted PKCS#8 (Kafka's PEM keystore reads it without a password);
# the client key is encrypted, so ssl_keyfile_password is exercised.
make_tls_material() {
  if [[ -f "$TLS_DIR/secured.done" ]]; then return 0; fi
  command -v openssl >/dev/null || die "openssl not on PATH; needed for EMBEDSTREAM_KAFKA_SECURED=1"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  (
    cd "$TLS_DIR"
    umask 077
    openssl rand -hex 16 >scram.password
    openssl rand -hex 16 >client.key.password
    openssl req -x509 -newkey rsa:2048 -noenc -keyout ca.key -out ca.pem -days 30 \
      -subj "/CN=embedstream test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    common='authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\nbasicConstraints=CA:FALSE'
    sign() {  # name, extensions
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
        -out "$1.crt" -extfile <(printf '%b\n' "$common\n$2")
    }
    openssl req -newkey rsa:2048 -noenc -keyout broker.key -out broker.csr -subj "/CN=127.0.0.1"
    sign broker 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth'
    cat broker.key broker.crt >broker.pem
    openssl req -newkey rsa:2048 -keyout client.key -passout file:client.key.password \
      -out client.csr -subj "/CN=embedstream-client"
    sign client 'extendedKeyUsage=clientAuth'
    mv client.crt client.pem
    rm -f ./*.csr ca.srl
  ) >>"$BROKER_LOG" 2>&1 || { tail -n 20 "$BROKER_LOG" >&2; die "generating the test certificates failed"; }
  touch "$TLS_DIR/secured.done"
}

write_secured_env() {
  cat >"$DATA_DIR/secured.env" <<EOF
plaintext_bootstrap=$BOOTSTRAP
sasl_ssl_bootstrap=127.0.0.1:$SASL_SSL_PORT
ssl_bootstrap=127.0.0.1:$SSL_PORT
ssl_cafile=$TLS_DIR/ca.pem
ssl_certfile=$TLS_DIR/client.pem
ssl_keyfile=$TLS_DIR/client.key
ssl_keyfile_password_file=$TLS_DIR/client.key.password
sasl_username=$SCRAM_USER
sasl_password_file=$TLS_DIR/scram.password
EOF
}

format_storage_once() {
  if [[ -f "$DATA_DIR/kraft-logs/meta.properties" ]]; then
    # SCRAM users exist only if the storage was formatted with them.
    if [[ "$SECURED" == 1 && ! -f "$DATA_DIR/kraft-logs/.secured" ]]; then
      die "$DATA_DIR was formatted without EMBEDSTREAM_KAFKA_SECURED=1; run 'kafka.sh clean' first"
    fi
    return 0
  fi
  local cluster_id
  # Kafka cluster ids are 16 random bytes, base64url without padding, not starting with '-'.
  cluster_id="$("$PYTHON" -c '
import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break
')"
  local scram=()
  if [[ "$SECURED" == 1 ]]; then
    local password
    password="$(cat "$TLS_DIR/scram.password")"
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
      scram+=(--add-scram "$mechanism=[name=$SCRAM_USER,password=$password]")
    done
  fi
  "$JAVA" -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J_CONFIG" \
    -Dkafka.logs.dir="$DATA_DIR" \
    kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$PROPERTIES" "${scram[@]}" \
    >>"$BROKER_LOG" 2>&1 || { tail -n 40 "$BROKER_LOG" >&2; die "storage format failed"; }
  if [[ "$SECURED" == 1 ]]; then touch "$DATA_DIR/kraft-logs/.secured"; fi
}

# Polls with aiokafka (the client the tests use) until the broker lists topics,
# failing early if the JVM has exited.
wait_until_ready() {
  "$PYTHON" - "$BOOTSTRAP" "$1" "$READY_TIMEOUT_S" <<'EOF'
import asyncio, logging, os, sys, time
from aiokafka.admin import AIOKafkaAdminClient

# Refused connections are expected while the JVM boots; do not print each one.
logging.disable(logging.CRITICAL)

bootstrap, pid, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

async def answers() -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    except Exception:
        return False
    finally:
        await admin.close()

async def main() -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print("kafka.sh: broker exited during startup", file=sys.stderr)
            return 1
        if await answers():
            return 0
        await asyncio.sleep(0.25)
    print(f"kafka.sh: broker not ready after {timeout_s:.0f} s", file=sys.stderr)
    return 1

sys.exit(asyncio.run(main()))
EOF
}

start() {
  mkdir -p "$DATA_DIR"
  chmod 700 "$DATA_DIR"
  # Serialise starts on one data dir: a second start waits for the first to be
  # ready instead of printing the bootstrap of a broker still booting.
  start_locked 9>"$DATA_DIR/.start.lock"
}

start_locked() {
  local pid
  flock 9
  if pid="$(running_pid)"; then
    echo "bootstrap=$BOOTSTRAP"
    if [[ "$SECURED" == 1 ]]; then echo "secured=$DATA_DIR/secured.env"; fi
    return 0
  fi
  local ports=("$PORT" "$CONTROLLER_PORT")
  if [[ "$SECURED" == 1 ]]; then ports+=("$SASL_SSL_PORT" "$SSL_PORT"); fi
  for port in "${ports[@]}"; do
    if port_in_use "$port"; then
      die "port $port is taken by another process; set EMBEDSTREAM_KAFKA_PORT"
    fi
  done
  fetch
  if [[ "$SECURED" == 1 ]]; then make_tls_material; fi
  write_properties
  format_storage_once
  rm -f "$PID_FILE"
  # setsid: the broker must outlive this shell and its process group. The inner
  # shell records its own pid and then execs java, so the pid file names the JVM.
  # 9>&-: the JVM must not inherit (and so keep holding) the start lock.
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
    "$JAVA" -Xms256m -Xmx1g -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONFIG" -Dkafka.logs.dir="$DATA_DIR" \
    -cp "$LIBS/*" kafka.Kafka "$PROPERTIES" \
    </dev/null >>"$BROKER_LOG" 2>&1 9>&- &
  local launcher=$!
  for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
  pid="$(cat "$PID_FILE" 2>/dev/null || echo "$launcher")"
  if ! wait_until_ready "$pid"; then
    tail -n 40 "$BROKER_LOG" "$DATA_DIR/server.log" >&2 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    exit 1
  fi
  echo "bootstrap=$BOOTSTRAP"
  if [[ "$SECURED" == 1 ]]; then
    write_secured_env
    echo "secured=$DATA_DIR/secured.env"
  fi
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    echo "kafka.sh: not running ($DATA_DIR)"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq $((STOP_TIMEOUT_S * 10))); do
    is_our_broker "$pid" || { rm -f "$PID_FILE"; echo "kafka.sh: stopped"; return 0; }
    sleep 0.1
  done
  echo "kafka.sh: no exit after ${STOP_TIMEOUT_S} s, sending SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PID_FILE"
}

# Chaos tests: die like a crashed machine, no clean shutdown (the data dir is kept).
kill_broker() {
  local pid
  if pid="$(running_pid)"; then
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  rm -f "$PID_FILE"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running pid=$pid bootstrap=$BOOTSTRAP dir=$DATA_DIR"
  else
    echo "stopped dir=$DATA_DIR"
    return 1
  fi
}

show_log() {
  local logs=()
  for file in "$BROKER_LOG" "$DATA_DIR/server.log"; do
    [[ -f "$file" ]] && logs+=("$file")
  done
  [[ ${#logs[@]} -gt 0 ]] || die "no logs in $DATA_DIR"
  # With several files, tail prints a '==> file <==' header before each.
  tail -n +1 "${logs[@]}"
}

clean() {
  stop
  [[ -d "$DATA_DIR" ]] || return 0
  # Refuse to wipe a directory this script did not set up (a mistyped
  # EMBEDSTREAM_KAFKA_DIR=$HOME must not cost the home directory).
  [[ -f "$PROPERTIES" || -f "$DATA_DIR/.start.lock" ]] \
    || die "$DATA_DIR does not look like a kafka.sh data dir; not deleting it"
  rm -rf "$DATA_DIR"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  kill) kill_broker ;;
  status) status ;;
  log) show_log ;;
  clean) clean ;;
  *) echo "usage: $0 {fetch|start|stop|kill|status|log|clean}" >&2; exit 2 ;;
esac
