"""Unary calls from one grpcio channel (the Python gRPC library, on gRPC core) to a zrpc server,
spread over time: a foreign client that must ride across the server's GOAWAYs (its connection
ages) without failing a call.

usage: grpcio_calls_over_time.py ADDR METHOD HEX_REQUEST COUNT INTERVAL_MS

Prints one JSON line: {"codes": [<grpc status name per call>], "details": [...]}.
"""

import json
import sys
import time

import grpc


def main():
    addr, method, hex_request, count, interval_ms = sys.argv[1:6]
    request = bytes.fromhex(hex_request)
    codes, details = [], []
    with grpc.insecure_channel(addr) as channel:
        call = channel.unary_unary(method)
        for _ in range(int(count)):
            try:
                call(request, timeout=10)
                codes.append("OK")
                details.append("")
            except grpc.RpcError as e:
                codes.append(e.code().name)
                details.append(e.details())
            time.sleep(int(interval_ms) / 1000)
    print(json.dumps({"codes": codes, "details": details}))


if __name__ == "__main__":
    main()
