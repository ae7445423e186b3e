# embedstream processor image (also runs `embedstream topics create` and `embedstream simulate`).
#
#   docker build -t embedstream:local .
#   docker run --rm -e EMBEDSTREAM_BOOTSTRAP_SERVERS=kafka:9092 -e OPENAI_API_KEY embedstream:local
#
# Stage 1 builds the wheel from the build context (see .dockerignore); stage 2 installs it
# non-editable, so the runtime image holds no sources, tests or build tools.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stream/ stream/
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
# The pgvector extra: the same image runs the store writer (`embedstream sink`).
RUN pip install --root-user-action=ignore "$(ls /wheels/*.whl)[pgvector]" && rm -rf /wheels

# A fixed, numeric, non-root uid/gid: Kubernetes' runAsNonRoot can only verify a numeric USER,
# and volume permissions stay predictable.
RUN groupadd --system --gid 10001 embedstream \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin embedstream

# The metrics server (/metrics, /healthz, /readyz) binds 127.0.0.1 by default, which inside a
# container is unreachable from Prometheus, the kubelet or other containers. In a container it
# must listen on the container's own interface, so bind all of them; publish the port only where
# it is meant to be seen (docker-compose.yml binds it to the host's 127.0.0.1).
ENV EMBEDSTREAM_METRICS_HOST=0.0.0.0 \
    EMBEDSTREAM_METRICS_PORT=9464
# The online lane (POST /v1/embeddings) is off until EMBEDSTREAM_HTTP_PORT is set (8080 by
# convention); beyond loopback it needs callers' keys (EMBEDSTREAM_HTTP_API_KEYS_FILE), so a
# container started without them refuses to start rather than serve anyone.
ENV EMBEDSTREAM_HTTP_HOST=0.0.0.0
EXPOSE 9464 8080

USER 10001:10001

# Liveness only (/healthz answers while the process runs); orchestrators check /readyz themselves.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('EMBEDSTREAM_METRICS_PORT', '9464'), timeout=3)"]

ENTRYPOINT ["embedstream"]
CMD ["run"]
