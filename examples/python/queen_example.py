"""What the Python examples share: command-line options, stubs generated from
proto/ with protoc and grpc_python_plugin, the channel (h2c or TLS), the bearer
token, and waiting for the broker to report SERVING.

Stubs are never committed. At run time they are generated into a temporary
directory (removed at exit), or read from QUEEN_STUBS_DIR when that directory
already holds them (the example container generates them once at build time).
"""

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["queen/v1/common.proto", "queen/v1/queue.proto", "queen/v1/admin.proto",
          "grpc/health/v1/health.proto"]
GRPC_PLUGIN = "/usr/bin/grpc_python_plugin"


def fail(msg, code=2):
    print("%s: %s" % (os.path.basename(sys.argv[0]), msg), file=sys.stderr)
    sys.exit(code)


def _have_stubs(d):
    return os.path.isfile(os.path.join(d, "queen", "v1", "queue_pb2_grpc.py")) and \
        os.path.isfile(os.path.join(d, "grpc", "health", "v1", "health_pb2_grpc.py"))


def generate_stubs(proto_dir, out):
    """Runs protoc with the Python and gRPC plugins over PROTOS into out."""
    for tool in ("protoc", GRPC_PLUGIN):
        if shutil.which(tool) is None:
            fail("%s not found: install protobuf-compiler and protobuf-compiler-grpc" % tool)
    for p in PROTOS:
        if not os.path.isfile(os.path.join(proto_dir, p)):
            fail("%s not found under %s (set --proto-dir or QUEEN_PROTO_DIR)" % (p, proto_dir))
    os.makedirs(out, exist_ok=True)
    r = subprocess.run(["protoc", "-I" + proto_dir, "--python_out=" + out, "--grpc_python_out=" + out,
                        "--plugin=protoc-gen-grpc_python=" + GRPC_PLUGIN] + PROTOS,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("protoc failed:\n" + r.stderr)


def load_stubs(proto_dir):
    """Makes queen.v1.*_pb2(_grpc) and grpc.health.v1.* importable; returns the
    modules as a namespace (queue, queue_grpc, admin, admin_grpc, common,
    health, health_grpc)."""
    out = os.environ.get("QUEEN_STUBS_DIR", "")
    if not out or not _have_stubs(out):
        if out:
            generate_stubs(proto_dir, out)
        else:
            out = tempfile.mkdtemp(prefix="queen-stubs-")
            atexit.register(shutil.rmtree, out, True)
            generate_stubs(proto_dir, out)
    sys.path.insert(0, out)
    try:
        import grpc
        import google.protobuf  # noqa: F401
    except ImportError as e:
        fail("%s; this Python (%s) lacks grpcio or protobuf: install python3-grpcio and "
             "python3-protobuf and run with /usr/bin/python3" % (e, sys.executable))
    # The health stubs live in the grpc.health.v1 package; graft the generated
    # directory onto grpcio's own package path so that import resolves.
    grpc.__path__.append(os.path.join(out, "grpc"))
    from queen.v1 import admin_pb2, admin_pb2_grpc, common_pb2, queue_pb2, queue_pb2_grpc
    from grpc.health.v1 import health_pb2, health_pb2_grpc

    return argparse.Namespace(queue=queue_pb2, queue_grpc=queue_pb2_grpc, admin=admin_pb2,
                              admin_grpc=admin_pb2_grpc, common=common_pb2, health=health_pb2,
                              health_grpc=health_pb2_grpc)


def positive(s):
    try:
        v = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % s)
    if v < 1:
        raise argparse.ArgumentTypeError("%r must be at least 1" % s)
    return v


def non_negative(s):
    try:
        v = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % s)
    if v < 0:
        raise argparse.ArgumentTypeError("%r must not be negative" % s)
    return v


def connection_args(p):
    """Options every example takes; the environment gives their defaults."""
    g = p.add_argument_group("connection")
    g.add_argument("--addr", default=os.environ.get("QUEEN_ADDR") or "localhost:6632",
                   help="broker address host:port (env QUEEN_ADDR; default localhost:6632)")
    g.add_argument("--ca", default=os.environ.get("QUEEN_CA") or None,
                   help="PEM CA file: connect with TLS and verify the broker against it (env QUEEN_CA)")
    g.add_argument("--server-name", default=None,
                   help="name to verify in the broker's certificate instead of the host of --addr")
    g.add_argument("--token", default=os.environ.get("QUEEN_TOKEN") or None,
                   help="bearer token sent as 'authorization: Bearer TOKEN' (env QUEEN_TOKEN)")
    g.add_argument("--wait-ready", type=non_negative, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for the broker's health service to report SERVING")
    g.add_argument("--proto-dir", default=os.environ.get("QUEEN_PROTO_DIR")
                   or os.path.join(HERE, "..", "..", "proto"),
                   help="directory holding queen/v1/*.proto (env QUEEN_PROTO_DIR)")
    g.add_argument("--json", action="store_true", help="print one JSON object per line")


class Conn:
    """A channel to the broker and the call metadata (the bearer token)."""

    def __init__(self, args, stubs):
        import grpc

        self.grpc = grpc
        if args.ca:
            try:
                with open(args.ca, "rb") as f:
                    ca = f.read()
            except OSError as e:
                fail("cannot read the CA file %s: %s" % (args.ca, e.strerror))
            opts = []
            if args.server_name:
                opts.append(("grpc.ssl_target_name_override", args.server_name))
            self.channel = grpc.secure_channel(args.addr, grpc.ssl_channel_credentials(root_certificates=ca),
                                               opts)
        else:
            self.channel = grpc.insecure_channel(args.addr)
        self.metadata = [("authorization", "Bearer " + args.token)] if args.token else []
        self.queue = stubs.queue_grpc.QueueServiceStub(self.channel)
        self.admin = stubs.admin_grpc.AdminServiceStub(self.channel)
        self.health = stubs.health_grpc.HealthStub(self.channel)
        self.stubs = stubs
        if args.wait_ready:
            self.wait_serving(args.wait_ready)

    def wait_serving(self, seconds):
        """Polls grpc.health.v1.Health/Check until SERVING; exits with status 2
        when the broker does not serve within `seconds`."""
        h = self.stubs.health
        deadline = time.monotonic() + seconds
        last = "no answer"
        while True:
            try:
                r = self.health.Check(h.HealthCheckRequest(service=""), timeout=2, metadata=self.metadata)
                if r.status == h.HealthCheckResponse.SERVING:
                    return
                last = h.HealthCheckResponse.ServingStatus.Name(r.status)
            except self.grpc.RpcError as e:
                last = "%s: %s" % (e.code().name, e.details())
            if time.monotonic() >= deadline:
                fail("the broker did not report SERVING within %d s (last: %s)" % (seconds, last))
            time.sleep(0.5)

    def close(self):
        self.channel.close()


def rpc_failure(e):
    """One line for a failed call: its status and message."""
    return "%s: %s" % (e.code().name, e.details())
