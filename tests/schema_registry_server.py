"""A test-only Confluent Schema Registry: the REST endpoints confluent-kafka's client and its
AvroSerializer call, served from memory on 127.0.0.1.

No Confluent-compatible registry server is installable from the package registries this project
can reach (Confluent's and Apicurio's are Java, from Maven; Karapace is not on PyPI), and
confluent-kafka's own mock registry lives inside one client object, so Spark's Python workers
(other processes) cannot share it. This server stands in for one in tests only; icetide never
imports it.

Served: POST /subjects/{subject}/versions (register), POST /subjects/{subject} (look a schema
up), GET /schemas/ids/{id}, GET /subjects, GET /subjects/{subject}/versions,
GET /subjects/{subject}/versions/{version|latest}. Optional basic auth (401 without the right
credentials, 403 for `forbidden_user`), and `fail_with` makes every request answer that status.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class _Subject:
    versions: list[int] = field(default_factory=list)  # schema ids, version i+1 at index i


class SchemaRegistryServer:
    """Start with `start()`, stop with `stop()`; `url` is its address. Thread-safe."""

    def __init__(self, *, user_info: str | None = None, forbidden_user: str | None = None) -> None:
        self.user_info = user_info
        self.forbidden_user = forbidden_user
        self.fail_with: int | None = None
        self.schemas: dict[int, dict[str, Any]] = {}  # id -> {"schema": text, "schemaType": ...}
        self.subjects: dict[str, _Subject] = {}
        self.requests: list[str] = []  # "METHOD path", for tests that count requests
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SchemaRegistryServer:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                registry._handle(self, "GET")

            def do_POST(self) -> None:
                registry._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- registry state -----------------------------------------------------------------------

    def register(self, subject: str, schema: str | dict[str, Any], schema_type: str = "AVRO") -> int:
        """Register a schema under a subject (as POST /subjects/{subject}/versions); its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            canonical = json.dumps(json.loads(text), sort_keys=True) if schema_type == "AVRO" else text
            schema_id = next(
                (i for i, s in self.schemas.items() if s["canonical"] == canonical and s["schemaType"] == schema_type),
                None,
            )
            if schema_id is None:
                schema_id = len(self.schemas) + 1
                self.schemas[schema_id] = {"schema": text, "schemaType": schema_type, "canonical": canonical}
            versions = self.subjects.setdefault(subject, _Subject()).versions
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def _version(self, subject: str, version: str) -> dict[str, Any] | None:
        entry = self.subjects.get(subject)
        if entry is None or not entry.versions:
            return None
        index = len(entry.versions) if version in ("latest", "-1") else int(version)
        if not 1 <= index <= len(entry.versions):
            return None
        schema_id = entry.versions[index - 1]
        return self._body(schema_id, subject=subject, version=index)

    def _body(self, schema_id: int, **extra: Any) -> dict[str, Any]:
        s = self.schemas[schema_id]
        body: dict[str, Any] = {"id": schema_id, "schema": s["schema"], **extra}
        if s["schemaType"] != "AVRO":
            body["schemaType"] = s["schemaType"]
        return body

    # -- HTTP ---------------------------------------------------------------------------------

    def _refused(self, handler: BaseHTTPRequestHandler) -> int | None:
        if self.user_info is None:
            return None
        header = handler.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return 401
        given = base64.b64decode(header[6:]).decode()
        if self.forbidden_user is not None and given.split(":", 1)[0] == self.forbidden_user:
            return 403
        return None if given == self.user_info else 401

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        path = [unquote(p) for p in parts.path.strip("/").split("/") if p]
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else None
        with self._lock:
            self.requests.append(f"{method} {parts.path}")
        status, answer = self._route(handler, method, path, body)
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, handler: BaseHTTPRequestHandler, method: str, path: list[str], body: Any) -> tuple[int, Any]:
        if self.fail_with is not None:
            return self.fail_with, {"error_code": self.fail_with * 100, "message": "failing on purpose (test)"}
        refused = self._refused(handler)
        if refused is not None:
            return refused, {"error_code": refused, "message": "Unauthorized" if refused == 401 else "Forbidden"}
        not_found = {"error_code": 40403, "message": "Schema not found"}
        if method == "GET" and path[:2] == ["schemas", "ids"] and len(path) == 3:
            schema_id = int(path[2])
            with self._lock:
                if schema_id not in self.schemas:
                    return 404, not_found
                body = self._body(schema_id)
                body.pop("id")
                return 200, body
        if path[:1] == ["subjects"]:
            if method == "GET" and len(path) == 1:
                return 200, sorted(self.subjects)
            subject = path[1] if len(path) > 1 else ""
            if method == "POST" and len(path) == 3 and path[2] == "versions":
                schema_id = self.register(subject, body["schema"], body.get("schemaType", "AVRO"))
                return 200, {"id": schema_id}
            if method == "POST" and len(path) == 2:
                with self._lock:
                    entry = self.subjects.get(subject)
                    canonical = json.dumps(json.loads(body["schema"]), sort_keys=True)
                    for version, schema_id in enumerate(entry.versions if entry else [], start=1):
                        if self.schemas[schema_id]["canonical"] == canonical:
                            return 200, self._body(schema_id, subject=subject, version=version)
                return 404, {"error_code": 40401 if entry is None else 40403, "message": "Subject or schema not found"}
            if method == "GET" and len(path) == 3 and path[2] == "versions":
                entry = self.subjects.get(subject)
                if entry is None:
                    return 404, {"error_code": 40401, "message": "Subject not found"}
                return 200, list(range(1, len(entry.versions) + 1))
            if method == "GET" and len(path) == 4 and path[2] == "versions":
                with self._lock:
                    found = self._version(subject, path[3])
                if found is None:
                    return 404, {"error_code": 40402, "message": "Version not found"}
                return 200, found
        return 404, {"error_code": 404, "message": f"not served by the test registry: {method} {'/'.join(path)}"}
