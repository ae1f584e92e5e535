"""moto's S3 server counting the requests it answers, by the kind S3 bills them as.

    .venv/bin/python bench/s3_counting_server.py PORT

The same server as tests/s3_server.py (`moto.server`'s app on werkzeug), wrapped in a WSGI
middleware. `GET /__counts` answers the counts so far as JSON and `POST /__counts` resets them.
Kinds: PUT (PutObject, UploadPart, CopyObject, and the POSTs that start and complete a multipart
upload: S3 bills them as PUT), GET (GetObject, ranged reads included), HEAD, LIST (a GET of the
bucket: ListObjectsV2), DELETE (DeleteObject, and DeleteObjects, one request for many keys). Each
request is also counted under "KIND object", the object being what its key names (`what`).
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


def what(path: str) -> str:
    """What the object of a path-style request is, by the names Iceberg and icetide give files."""
    key = path.strip("/").partition("/")[2]
    name = key.rsplit("/", 1)[-1]
    if not key:
        return "bucket (list, batch delete)"
    if "/_icetide-key-index/" in key:
        return "key index copy"
    if "/metadata/" in key:
        if name.endswith(".metadata.json"):
            return "table metadata"
        if name.endswith(".avro"):
            return "manifest list" if name.startswith("snap-") else "manifest"
        return "other metadata"
    if "-eqdel-" in name:
        return "equality deletes"
    if name.endswith(".puffin"):
        return "deletion vectors"
    return "data" if "/data/" in key else "other"


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
            billed = kind(method, path, environ.get("QUERY_STRING", ""))
            self.counts[billed] += 1
            self.counts[f"{billed} {what(path)}"] += 1
        return self.app(environ, start_response)


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    port = int(sys.argv[1])
    run_simple("127.0.0.1", port, Counting(DomainDispatcherApplication(create_backend_app)), threaded=True)


if __name__ == "__main__":
    main()
