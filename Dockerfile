FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY coordinator ./coordinator
COPY protocol ./protocol
COPY storage ./storage
COPY groupcoord ./groupcoord
RUN pip install --no-cache-dir --prefix=/install ".[oauth]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --home-dir /var/lib/groupcoord groupcoord \
    && mkdir -p /var/lib/groupcoord/data && chown -R groupcoord /var/lib/groupcoord
USER groupcoord
WORKDIR /var/lib/groupcoord
VOLUME ["/var/lib/groupcoord/data"]
ENV GROUPCOORD_LISTEN=0.0.0.0:9092 \
    GROUPCOORD_METRICS_LISTEN=0.0.0.0:9464 \
    GROUPCOORD_DATA_DIR=/var/lib/groupcoord/data
EXPOSE 9092 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9464/health', timeout=2).status == 200 else 1)"
STOPSIGNAL SIGTERM
ENTRYPOINT ["groupcoord", "serve"]
