# One image for web, worker and beat (see docker-compose.yml).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_LINK_MODE=copy UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH MOTOR_DATA_DIR=/data

# bubblewrap: the default sandbox backend; curl: healthchecks
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap curl \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir uv \
 && useradd --system --uid 10000 --home-dir /app motor \
 && mkdir -p /data && chown motor:motor /data

WORKDIR /app
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project
COPY . .
# (metric samples of this build step go to /tmp, not into the image's /data)
RUN DEBUG=true MOTOR_METRICS_DIR=/tmp/build-metrics python manage.py collectstatic --noinput

# The worker runs unprivileged here: its bwrap sessions run as this user and never take the
# root-only launch path, so the image needs no sandbox launcher (sandbox/launcher/, built by
# bin/setup-host on hosts whose worker runs as root) and no C compiler.
USER motor
EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
