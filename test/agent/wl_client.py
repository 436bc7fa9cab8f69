#!/usr/bin/python3
"""wl_client.py: the gRPC half of agentlib.Workload, a Workload API client in a
process of its own that a TAP script drives through its stdin and stdout.

The client is Debian's python3-grpcio with the stubs agentlib.workload_stubs
makes from src/agent/workload/workload.proto.  A script must not import grpc
itself: every script forks after its first call (psql, openssl, bcd, hooks),
and grpcio 1.51's fork handler under Python 3.13 (Debian 13) waits, every 3 s
and for good, for a thread pool that never idles ("Waiting for thread pool to
idle before forking"; grpc/grpc#31885).  This process forks nothing.

argv: the stubs' directory, the socket, the channel's options (JSON, a list of
[name, value]).  stdin: one JSON command a line; stdout: one JSON answer a line.
Requests and responses are the messages' serialized bytes in base64; "metadata"
true sends "workload.spiffe.io: true".

  {"op": "call", "method": M, "request": B64, "metadata": b, "timeout": s}
      a unary call: {"code": "OK", "response": B64} or {"code": NAME, "details": T}
  {"op": "open", "stream": ID, "method": M, "request": B64, "metadata": b, "timeout": s}
      a server stream, read by a thread of its own as its messages come: {"code": "OK"}
  {"op": "next", "stream": ID}
      its next message, {"code": "OK", "response": B64}, or how it ended:
      {"code": "END"} (OK) or {"code": NAME, "details": T}, again at every later next
  {"op": "cancel_in", "stream": ID, "seconds": s or null}
      the stream cancelled s seconds from now (null: not any more): {"code": "OK"}
  {"op": "cancel", "stream": ID}: the stream cancelled now, {"code": "OK"}
  {"op": "close"}: {"code": "OK"}, the channel closed, the process ends
Anything that goes wrong here is {"code": "HELPER", "details": the traceback}.
"""
import base64
import json
import queue
import sys
import threading
import traceback

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import workload_pb2 as pb  # noqa: E402
import workload_pb2_grpc as pbg  # noqa: E402

HDR = [("workload.spiffe.io", "true")]
SERVICE = pb.DESCRIPTOR.services_by_name["SpiffeWorkloadAPI"]

channel = grpc.insecure_channel("unix://" + sys.argv[2],
                                options=[tuple(o) for o in json.loads(sys.argv[3])])
stub = pbg.SpiffeWorkloadAPIStub(channel)
streams = {}


class Stream:
    """A server stream and the thread that queues what it brings."""

    def __init__(self, call):
        self.call = call
        self.q = queue.Queue()
        self.end = None
        self.timer = None
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        try:
            for m in self.call:
                self.q.put({"code": "OK", "response": b64(m.SerializeToString())})
            self.q.put({"code": "END"})
        except grpc.RpcError as e:
            self.q.put({"code": e.code().name, "details": e.details() or ""})

    def next(self):
        if self.end is not None:
            return self.end
        a = self.q.get()
        if a["code"] != "OK":
            self.end = a
        return a


def b64(data):
    return base64.b64encode(data).decode()


def request(cmd):
    """The method's callable and its request message of a command."""
    m = SERVICE.methods_by_name[cmd["method"]]
    req = getattr(pb, m.input_type.name).FromString(base64.b64decode(cmd["request"]))
    return getattr(stub, cmd["method"]), req, dict(metadata=HDR if cmd.get("metadata") else None,
                                                   timeout=cmd.get("timeout"))


def answer(cmd):
    op = cmd["op"]
    if op == "call":
        fn, req, kw = request(cmd)
        try:
            return {"code": "OK", "response": b64(fn(req, **kw).SerializeToString())}
        except grpc.RpcError as e:
            return {"code": e.code().name, "details": e.details() or ""}
    if op == "open":
        fn, req, kw = request(cmd)
        streams[cmd["stream"]] = Stream(fn(req, **kw))
        return {"code": "OK"}
    if op == "close":
        for s in streams.values():
            s.call.cancel()
        channel.close()
        return {"code": "OK"}
    s = streams[cmd["stream"]]
    if op == "next":
        return s.next()
    if op == "cancel":
        s.call.cancel()
        return {"code": "OK"}
    if op == "cancel_in":
        if s.timer:
            s.timer.cancel()
        s.timer = None
        if cmd.get("seconds") is not None:
            s.timer = threading.Timer(cmd["seconds"], s.call.cancel)
            s.timer.daemon = True
            s.timer.start()
        return {"code": "OK"}
    raise ValueError("no such op: %r" % op)


for line in sys.stdin:
    try:
        cmd = json.loads(line)
        a = answer(cmd)
    except Exception:  # noqa: BLE001  (told to the script, which fails)
        cmd, a = {}, {"code": "HELPER", "details": traceback.format_exc()}
    sys.stdout.write(json.dumps(a) + "\n")
    sys.stdout.flush()
    if cmd.get("op") == "close":
        break
