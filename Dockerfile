# Image for the api, worker and beat services of docker-compose.yml.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends g++ git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cli cli
COPY relay relay
COPY workers workers
COPY planner planner
COPY fanout fanout
COPY evaluation evaluation
COPY inventory inventory
COPY selector selector
COPY upstream upstream
COPY backends backends
COPY migrations migrations
COPY store store
COPY wire wire
COPY testspecs testspecs
COPY spyre_stack spyre_stack
COPY plugins plugins
COPY config config
# torch==2.13.0 CPU build: take it from PyTorch's CPU index, not the default CUDA wheel.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu .
ENV RELAY_VAR_DIR=/var/lib/relay
VOLUME /var/lib/relay
EXPOSE 8000
CMD ["relay", "up", "--host", "0.0.0.0"]
