# orchestrate in a container: `docker run IMAGE plan gpu02 --tag v0.0.300`, or team mode with
# ORCHESTRATOR_DATABASE_URL set. Not built in CI (no Docker engine on the CI machines); .ci/smoke-wheel
# checks the same wheel installs and runs from outside the checkout.
#
# Stage 1 builds the wheel from the source tree; stage 2 installs only that wheel (not the source,
# not editable), so the image runs exactly what the wheel ships: the runbooks
# (orchestrator/runbooks/) and the simulator (orchestrator_sim) included.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY orchestrator_sim ./orchestrator_sim
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist /tmp/dist
RUN pip install /tmp/dist/orchestrator-*.whl && rm -rf /tmp/dist \
    && useradd --create-home --uid 10001 orchestrator && mkdir -p /state && chown orchestrator /state
# the inventory is configuration, not code: mount your own over /etc/orchestrator/hosts.yaml
COPY config/hosts.yaml /etc/orchestrator/hosts.yaml
USER orchestrator
WORKDIR /home/orchestrator
ENV ORCHESTRATOR_STATE_DIR=/state ORCHESTRATOR_INVENTORY=/etc/orchestrator/hosts.yaml
ENTRYPOINT ["orchestrate"]
CMD ["--help"]
