"""A pass-through proxy between the Tinker SDK and a self-hosted Tinker-API server that
bridges the one gap between SkyRL's server (skyrl 0.4.0) and the SDK (tinker >= 0.38)
that the SDK cannot get past:

- `sample_sequence_ids`: the SDK asserts that the promise `/api/v1/asample` returns
  carries one id per sample (it stamps them on the sequences); SkyRL's promise has none.
  The bridge adds `<request_id>:<i>` for each of the request's `num_samples`.

Everything else passes through unchanged. `counts` says how often the bridge had to act,
so a test can assert the gap is still there (and notice a server that closes it).
Standard library only: `python tests/engines/tinker_bridge.py UPSTREAM_URL` serves on a
free port and prints its URL, for anyone who runs `engine=tinker` against such a server.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def add_sequence_ids(request: dict[str, Any], reply: dict[str, Any]) -> bool:
    """The asample promise with one id per sample; True if the bridge added them."""
    if reply.get("sample_sequence_ids") is not None or "request_id" not in reply:
        return False
    n = int(request.get("num_samples", 1))
    reply["sample_sequence_ids"] = [f"{reply['request_id']}:{i}" for i in range(n)]
    return True


class Bridge:
    """The proxy on 127.0.0.1 and a free port, in a thread of this process."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.counts: Counter[str] = Counter()
        bridge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                req = urllib.request.Request(
                    bridge.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(req, timeout=600) as up:
                        status, reply_headers, data = up.status, up.headers, up.read()
                except urllib.error.HTTPError as err:
                    status, reply_headers, data = err.code, err.headers, err.read()
                except OSError as err:  # the server is down: say so rather than hang up
                    detail = f"the Tinker-API server at {bridge.upstream} is unreachable: {err}"
                    data = json.dumps({"detail": detail}).encode()
                    status, reply_headers = 502, {"Content-Type": "application/json"}
                if self.path.startswith("/api/v1/asample") and status == 200 and body:
                    reply = json.loads(data)
                    if add_sequence_ids(json.loads(body), reply):
                        bridge.counts["sample_sequence_ids"] += 1
                        data = json.dumps(reply).encode()
                self.send_response(status)
                for k, v in reply_headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/engines/tinker_bridge.py UPSTREAM_URL")
    running = Bridge(sys.argv[1])
    print(running.url, flush=True)
    running.thread.join()
