# syntax=docker/dockerfile:1
# The service as one image, its role by argument (README: "Deploying with Docker"):
#   docker run IMAGE web      Slack's endpoint: verifies, dedupes, enqueues (PORT)
#   docker run IMAGE worker   the agent runner (its /healthz on WORKER_HEALTH_PORT)
#   docker run IMAGE          both, as `python -m bot` (an embedded Redis under /app/data unless REDIS_URL is set)
# Settings come from the environment (`--env-file .env`); the image holds no secret and no .env.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# The virtualenv is built here, so pip's downloads and build files stay out of the image.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY agent_core agent_core
COPY tools tools
COPY bot bot
# The tested versions (constraints.txt), not whatever the open ranges of pyproject.toml allow today.
RUN pip install --no-cache-dir -c constraints.txt .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
# A fixed uid, so volumes (DATA_DIR) can be given to it; -l: no huge lastlog entry for a high uid.
RUN useradd --no-log-init -l --create-home --uid 10001 --user-group agent \
    && mkdir /app && chown agent:agent /app
COPY --from=builder /opt/venv /opt/venv
COPY deploy/healthcheck.py /usr/local/lib/agent/healthcheck.py
WORKDIR /app
USER 10001:10001
# PORT (web), WORKER_HEALTH_PORT (a worker's /healthz), METRICS_PORT as compose.yaml sets it.
EXPOSE 3000 3001 9100
# Either role: /healthz on PORT, else on the worker's port (stdlib only, so a check costs no settings import).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "/usr/local/lib/agent/healthcheck.py"]
ENTRYPOINT ["python", "-m", "bot"]
CMD ["all"]
