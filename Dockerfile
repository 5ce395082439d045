# partarchive: archiver and HTTP API in one runtime image (non-root, no build tools, no test deps).
# The install is the one tests/test_packaging.py runs in CI: `pip install <sources>[server]`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY codec codec
COPY layers layers
COPY stats stats
COPY archiver archiver
RUN python -m venv /opt/partarchive \
 && /opt/partarchive/bin/pip install --no-cache-dir --disable-pip-version-check '/src[server]'

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin partarchive
COPY --from=build /opt/partarchive /opt/partarchive
ENV PATH=/opt/partarchive/bin:$PATH PYTHONUNBUFFERED=1
USER partarchive
EXPOSE 8080 9100
# `partarchive run` for the archiver, `partarchive serve --host 0.0.0.0` for the API and dashboard
ENTRYPOINT ["partarchive"]
CMD ["run", "--metrics-port", "9100", "--metrics-host", "0.0.0.0"]
