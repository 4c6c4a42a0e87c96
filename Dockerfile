# dpmine server image. The builder stage builds the wheel from the source tree; the runtime
# stage installs only that wheel with the server extra (as a data owner's
# `pip install 'dpmine[server]'` would), never the source tree. Every dependency installs from a
# wheel (--only-binary=:all:): the slim image has no C compiler, and nothing needs one.
FROM python:3.11-slim AS builder

WORKDIR /src
RUN pip install --no-cache-dir "build>=1.2"
COPY pyproject.toml README.md LICENSE ./
COPY client ./client
COPY server ./server
RUN python -m build --wheel --outdir /dist


FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DPMINE_HOST=0.0.0.0 \
    DPMINE_PORT=8000 \
    DPMINE_DATA_DIR=/var/lib/dpmine/data \
    NUMBA_CACHE_DIR=/var/lib/dpmine/numba-cache

COPY --from=builder /dist/ /tmp/dist/
RUN wheel="$(ls /tmp/dist/dpmine-*-py3-none-any.whl)" \
    && pip install --no-cache-dir --only-binary=:all: "${wheel}[server]" \
    && rm -rf /tmp/dist \
    && useradd --system --home /var/lib/dpmine --create-home dpmine \
    && mkdir -p /var/lib/dpmine/data /var/lib/dpmine/numba-cache \
    && chown -R dpmine /var/lib/dpmine

USER dpmine
# The migrations run from the installed package; relative default paths land in dpmine's home.
WORKDIR /var/lib/dpmine
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 --start-period=180s \
    CMD python -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:8000/v1/health').status_code != 200)"
CMD ["dpmine-server", "serve"]
