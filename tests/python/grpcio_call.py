"""One unary call from grpcio (the Python gRPC library, on gRPC core) to a zrpc server, for
zrpc's compression tests: a foreign peer that compresses with its own gzip.

usage: grpcio_call.py ADDR METHOD HEX_REQUEST COMPRESSION [REPEAT]

  ADDR         host:port of the server (plaintext)
  METHOD       full method, e.g. /greeter.Greeter/SayHello
  HEX_REQUEST  the request message, protobuf-encoded, in hex (grpcio sends the bytes as they are)
  COMPRESSION  gzip, deflate or none: the channel's compression of requests
  REPEAT       optional: the request repeated this many times as one message's payload
               (a large, very compressible message)

Prints one JSON line: {"code": <grpc status name>, "details": ..., "reply": <hex>,
"accept_encoding": <grpc-accept-encoding of the error's trailing metadata, if any>}.
"""

import json
import sys

import grpc


def main():
    addr, method, hex_request, compression = sys.argv[1:5]
    repeat = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    request = bytes.fromhex(hex_request) * repeat
    algorithm = {
        "gzip": grpc.Compression.Gzip,
        "deflate": grpc.Compression.Deflate,
        "none": grpc.Compression.NoCompression,
    }[compression]
    with grpc.insecure_channel(addr, compression=algorithm) as channel:
        call = channel.unary_unary(method)
        out = {"code": "OK", "details": "", "reply": "", "accept_encoding": ""}
        try:
            out["reply"] = call(request, timeout=10).hex()
        except grpc.RpcError as e:
            out["code"] = e.code().name
            out["details"] = e.details()
            for k, v in e.trailing_metadata() or ():
                if k == "grpc-accept-encoding":
                    out["accept_encoding"] = v
    print(json.dumps(out))


if __name__ == "__main__":
    main()
