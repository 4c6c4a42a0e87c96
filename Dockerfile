# dpmine server image.
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DPMINE_HOST=0.0.0.0 \
    DPMINE_PORT=8000 \
    DPMINE_DATA_DIR=/var/lib/dpmine/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY client ./client
COPY server ./server
RUN pip install --no-cache-dir '.[server]' \
    && useradd --system --home /var/lib/dpmine --create-home dpmine \
    && mkdir -p /var/lib/dpmine/data && chown -R dpmine /var/lib/dpmine

USER dpmine
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
    CMD python -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:8000/v1/health').status_code != 200)"
CMD ["dpmine-server", "serve"]
