"""A test-only Schema Registry: the REST endpoints confluent-kafka's client and its
AvroSerializer call, and those Apicurio's Kafka Connect converter calls, served from memory on
127.0.0.1.

No registry server runs here from the package registries this project can reach: Confluent's is
not on Maven Central; Apicurio Registry's server is (`io.apicurio:apicurio-registry-app`), but as
the plain jar of a Quarkus application that needs Quarkus's build step before it runs, and its
3.x releases need Java 21; Karapace is not on PyPI. confluent-kafka's own mock registry lives
inside one client object, so Spark's Python workers (other processes) cannot share it. This
server stands in for one in tests only; icetide never imports it.

Served, Confluent's API (also under Apicurio's `/apis/ccompat/v6` and `/apis/ccompat/v7`, where a
real Apicurio Registry serves it): POST /subjects/{subject}/versions (register),
POST /subjects/{subject} (look a schema up), GET /schemas/ids/{id}, GET /subjects,
GET /subjects/{subject}/versions, GET /subjects/{subject}/versions/{version|latest}.

Apicurio's v2 API, as the serializer of `io.apicurio:apicurio-registry-utils-converter` 2.6
calls it with `apicurio.registry.auto-register=true` (its `DefaultSchemaResolver` and
`RegistryClientImpl`): POST /apis/registry/v2/groups/{group}/artifacts with the schema as the
body, the artifact id in `X-Registry-ArtifactId` and `ifExists=RETURN_OR_UPDATE`, answered with
the version's metadata; and, for its deserializer, GET /apis/registry/v2/ids/contentIds/{id} and
/ids/globalIds/{id} (the schema text) and their `/references` (none). As in Apicurio, an artifact
of the default group is the Confluent subject of the same name and a content id is the Confluent
schema id, so an id the converter writes with `apicurio.registry.use-id=contentId` resolves
through GET /schemas/ids/{id}. Global ids (one per artifact version) are numbered from
`GLOBAL_ID_BASE`, apart from content ids, so a converter writing global ids into Confluent's
wire format makes a reader find no schema, never a wrong one.

Optional basic auth (401 without the right credentials, 403 for `forbidden_user`), and
`fail_with` makes every request answer that status.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

GLOBAL_ID_BASE = 1000  # Apicurio global ids start past the content ids a test registers
APICURIO_V2 = ["apis", "registry", "v2"]
CCOMPAT_PREFIXES = (["apis", "ccompat", "v6"], ["apis", "ccompat", "v7"])


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
        self.global_ids: dict[tuple[str, int], int] = {}  # (subject, version) -> Apicurio global id
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
                self.global_ids[(subject, len(versions))] = GLOBAL_ID_BASE + len(self.global_ids) + 1
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
        raw = handler.rfile.read(length).decode() if length else ""
        with self._lock:
            self.requests.append(f"{method} {parts.path}")
        if path[:3] == APICURIO_V2:  # the body as sent: Apicurio stores a schema's text as it comes
            status, answer = self._route_apicurio(handler, method, path[3:], parse_qs(parts.query), raw)
        else:
            prefix = next((p for p in CCOMPAT_PREFIXES if path[:3] == p), [])
            status, answer = self._route(handler, method, path[len(prefix) :], json.loads(raw) if raw else None)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(data)))
        # Said, not only implied by HTTP/1.0: Java's HttpClient (Apicurio's converter) pools a
        # connection whose response has no `Connection: close`, and its next request on the
        # connection this server closed fails with "header parser received no bytes".
        handler.send_header("Connection", "close")
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

    def _route_apicurio(
        self, handler: BaseHTTPRequestHandler, method: str, path: list[str], query: dict[str, list[str]], body: str
    ) -> tuple[int, Any]:
        """Apicurio's v2 API, as far as its Kafka Connect converter calls it (see the module's doc)."""
        if self.fail_with is not None:
            return self.fail_with, {"error_code": self.fail_with, "message": "failing on purpose (test)"}
        refused = self._refused(handler)
        if refused is not None:
            return refused, {"error_code": refused, "message": "Unauthorized" if refused == 401 else "Forbidden"}
        if method == "POST" and len(path) == 3 and path[0] == "groups" and path[2] == "artifacts":
            return self._create_artifact(handler, path[1], query, body)
        if (
            method == "GET"
            and len(path) in (3, 4)
            and path[:1] == ["ids"]
            and path[2].isdigit()
            and path[3:] in ([], ["references"])
        ):
            kind, wanted = path[1], int(path[2])
            with self._lock:
                if kind == "contentIds":
                    found = wanted if wanted in self.schemas else None
                else:
                    found = next(
                        (self.subjects[s].versions[v - 1] for (s, v), g in self.global_ids.items() if g == wanted), None
                    )
                if found is None:
                    return 404, {"error_code": 404, "message": f"No content with id {wanted}"}
                return 200, [] if path[3:] else self.schemas[found]["schema"].encode()
        return 404, {"error_code": 404, "message": f"not served by the test registry: {method} {'/'.join(path)}"}

    def _create_artifact(
        self, handler: BaseHTTPRequestHandler, group: str, query: dict[str, list[str]], body: str
    ) -> tuple[int, Any]:
        """Register the body under the artifact named by X-Registry-ArtifactId; its version's metadata."""
        artifact = handler.headers.get("X-Registry-ArtifactId")
        kind = handler.headers.get("X-Registry-ArtifactType", "AVRO")
        if_exists = query.get("ifExists", ["FAIL"])[0]
        if group != "default" or not artifact or kind != "AVRO" or if_exists != "RETURN_OR_UPDATE":
            return 400, {
                "error_code": 400,
                "message": "the test registry creates AVRO artifacts of the default group, named, with "
                f"ifExists=RETURN_OR_UPDATE only (group {group}, id {artifact}, type {kind}, ifExists {if_exists})",
            }
        if "create.extended" in handler.headers.get("Content-Type", ""):  # {"content": ..., "references": [...]}
            extended = json.loads(body)
            if extended.get("references"):
                return 400, {"error_code": 400, "message": "the test registry serves no schema references"}
            body = extended["content"]
        content_id = self.register(artifact, body)
        with self._lock:
            version = self.subjects[artifact].versions.index(content_id) + 1
            global_id = self.global_ids[(artifact, version)]
        return 200, {
            "groupId": group,
            "id": artifact,
            "version": str(version),
            "type": kind,
            "globalId": global_id,
            "contentId": content_id,
            "state": "ENABLED",
        }
