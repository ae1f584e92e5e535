"""moto's S3 server counting the requests it answers, by the kind S3 bills them as.

    .venv/bin/python bench/s3_counting_server.py PORT

The same server as tests/s3_server.py (`moto.server`'s app on werkzeug), wrapped in a WSGI
middleware. `GET /__counts` answers the counts so far as JSON and `POST /__counts` resets them.
Kinds: PUT (PutObject, UploadPart, CopyObject, and the POSTs that start and complete a multipart
upload: S3 bills them as PUT), GET (GetObject, ranged reads included), HEAD, LIST (a GET of the
bucket: ListObjectsV2), DELETE (DeleteObject, and DeleteObjects, one request for many keys).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

COUNTS_PATH = "/__counts"


def kind(method: str, path: str, query: str) -> str:
    """The billing kind of one path-style request."""
    bucket_only = path.strip("/").count("/") == 0
    if method == "GET":
        return "LIST" if bucket_only else "GET"
    if method == "POST":
        return "DELETE" if "delete" in query.split("&") or query.startswith("delete") else "PUT"
    return method  # PUT, HEAD, DELETE


class Counting:
    """WSGI middleware counting requests by kind."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        if path == COUNTS_PATH:
            with self.lock:
                body = json.dumps(dict(self.counts)).encode()
                if method == "POST":
                    self.counts.clear()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        with self.lock:
            self.counts[kind(method, path, environ.get("QUERY_STRING", ""))] += 1
        return self.app(environ, start_response)


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    port = int(sys.argv[1])
    run_simple("127.0.0.1", port, Counting(DomainDispatcherApplication(create_backend_app)), threaded=True)


if __name__ == "__main__":
    main()
