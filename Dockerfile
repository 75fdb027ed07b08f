# orchestrate in a container: `docker run IMAGE plan gpu02 --tag v0.0.300`, or team mode with
# ORCHESTRATOR_DATABASE_URL set. Not built in CI (no Docker engine on the CI machines).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY orchestrator_sim ./orchestrator_sim
COPY config ./config
RUN pip install . && useradd --create-home --uid 10001 orchestrator && mkdir -p /state && chown orchestrator /state
USER orchestrator
ENV ORCHESTRATOR_STATE_DIR=/state ORCHESTRATOR_INVENTORY=/app/config/hosts.yaml
ENTRYPOINT ["orchestrate"]
CMD ["--help"]
