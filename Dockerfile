# orchestrate in a container. One-shot commands: `docker run IMAGE plan gpu02 --tag v0.0.300`.
# Team mode (docs/team-mode.md), reachable and healthy:
#   docker run -d -p 8443:8000 -v orchestrator-state:/state -v /etc/orchestrator:/etc/orchestrator:ro \
#     -e ORCHESTRATOR_SERVER_TOKENS_FILE=/etc/orchestrator/tokens.yaml IMAGE \
#     serve --tls-cert /etc/orchestrator/server.pem --tls-key /etc/orchestrator/server.key --allowed-host orchestrate.internal
# (the server refuses a network bind without TLS unless told --insecure-plaintext-on-network, for a
# TLS proxy in front of it). Not built in CI (no Docker engine on the CI machines):
# tests/core/test_wheel_contents.py builds the wheel from exactly what stage 1 copies and checks its
# contents, and .ci/smoke-wheel installs that wheel with the same lock and runs it.
#
# Stage 1 builds the wheel from the source tree; stage 2 installs only that wheel (not the source,
# not editable) with every dependency pinned by requirements.lock (pip-compile, `make lock`), so the
# image runs exactly what the wheel ships: the runbooks (top-level runbooks/, shipped as
# orchestrator/runbooks/), the web page's static files and the simulator (orchestrator_sim).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY orchestrator_sim ./orchestrator_sim
COPY runbooks ./runbooks
COPY config ./config
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock /tmp/requirements.lock
COPY --from=build /dist /tmp/dist
RUN pip install --constraint /tmp/requirements.lock /tmp/dist/orchestrator-*.whl && rm -rf /tmp/dist /tmp/requirements.lock \
    && useradd --create-home --uid 10001 orchestrator && mkdir -p /state && chown orchestrator /state
# the inventory is configuration, not code: mount your own over /etc/orchestrator/hosts.yaml
COPY config/hosts.yaml /etc/orchestrator/hosts.yaml
USER orchestrator
WORKDIR /home/orchestrator
# The journal (SQLite) and the run logs: keep them across containers (a run resumes from there).
VOLUME ["/state"]
# `serve` listens on the container's interface (127.0.0.1 stays the default outside a container);
# publish the port with -p.
ENV ORCHESTRATOR_STATE_DIR=/state ORCHESTRATOR_INVENTORY=/etc/orchestrator/hosts.yaml \
    ORCHESTRATOR_SERVER_BIND=0.0.0.0 ORCHESTRATOR_SERVER_PORT=8000
EXPOSE 8000
# /healthz of the container's `serve` (HTTP or TLS, over loopback); a one-shot command is healthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 CMD ["python", "-m", "orchestrator.teamserver.healthcheck"]
ENTRYPOINT ["orchestrate"]
CMD ["--help"]
