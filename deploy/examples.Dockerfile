# The Python example producer (examples/python) as an image: the compose stack's
# one-shot container that pushes messages into the broker it starts.
#   docker build -f deploy/examples.Dockerfile -t queen-examples .
# Its stubs are generated from proto/ once, here, with Debian's protoc and
# grpc_python_plugin; the entrypoint is the producer (pass its options).
FROM debian:12
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY proto /opt/queen/proto
COPY examples/python /opt/queen/examples/python
ENV QUEEN_PROTO_DIR=/opt/queen/proto QUEEN_STUBS_DIR=/opt/queen/stubs PYTHONDONTWRITEBYTECODE=1
RUN /usr/bin/python3 -c "import sys; sys.path.insert(0, '/opt/queen/examples/python'); \
import queen_example; queen_example.load_stubs('/opt/queen/proto')"
USER nobody
ENTRYPOINT ["/usr/bin/python3", "/opt/queen/examples/python/producer.py"]
