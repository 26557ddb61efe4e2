"""grpc.testing.TestService's UnaryCall on grpcio (the Python gRPC library, on gRPC core), as
gRPC's interop server answers it: a SimpleResponse whose payload has `response_size` zero
octets, compressed with gzip when `response_compressed` is true. A second gRPC stack for zrpc's
status-code and message-limit tests. No generated code (the machine has no protobuf package):
the request is parsed by hand, strictly, so a message that does not parse fails as it would
with generated code.

usage: grpcio_server.py

Listens on 127.0.0.1 (a port the OS picks), prints `{"port": N}` on one line, and serves until
stdin closes.
"""

import json
import sys
from concurrent import futures

import grpc


class Malformed(Exception):
    pass


def varint(data, i):
    shift = 0
    value = 0
    while True:
        if i >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def fields(data):
    """(number, wire type, value) of each field; raises Malformed on bad wire data."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed("field number 0")
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 2:
            n, i = varint(data, i)
            value, i = data[i : i + n], i + n
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise Malformed(f"wire type {wire}")
        if i > len(data):
            raise Malformed("truncated field")
        yield number, wire, value


def parse_simple_request(data):
    request = {"response_size": 0, "response_compressed": False}
    for number, wire, value in fields(data):
        if number == 2 and wire == 0:
            request["response_size"] = value
        elif number == 6 and wire == 2:
            request["response_compressed"] = any(n == 1 and v for n, _, v in fields(value))
    return request


def encode_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def length_delimited(number, payload):
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def unary_call(request, context):
    if request["response_compressed"]:
        context.set_compression(grpc.Compression.Gzip)
    body = bytes(request["response_size"])
    payload = length_delimited(2, body) if body else b""
    return length_delimited(1, payload)


def main():
    handler = grpc.method_handlers_generic_handler(
        "grpc.testing.TestService",
        {
            "UnaryCall": grpc.unary_unary_rpc_method_handler(
                unary_call,
                request_deserializer=parse_simple_request,
                response_serializer=lambda b: b,
            ),
        },
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        # gRPC core's default limit, said explicitly: 4 MiB received, sent unbounded
        options=[
            ("grpc.max_receive_message_length", 4 * 1024 * 1024),
            ("grpc.max_send_message_length", -1),
        ],
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(json.dumps({"port": port}), flush=True)
    sys.stdin.read()
    server.stop(None)


if __name__ == "__main__":
    main()
