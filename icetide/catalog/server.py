"""An Iceberg REST catalog server in front of any catalog icetide can open (`icetide catalog serve`).

The server is jvm/IcetideCatalogServer.java: the REST protocol's routes on the JDK's HTTP server,
answered by Iceberg's own `CatalogHandlers`. It runs in a plain JVM (no Spark), on the classpath
Spark sessions get: PySpark's jars (Hadoop), Iceberg's runtime jar, icetide's jar (the embedded
catalog's commit lock), a JDBC catalog's driver and, for a catalog on S3, Iceberg's AWS bundle.
The backing catalog's properties are those a Spark session gets for the same catalog
(`catalog_conf`), so the server and icetide's own sessions commit the same way, with the same lock,
and can run side by side. They reach the JVM
on its standard input, never on its command line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from icetide.catalog.settings import COMMIT_LOCK_IMPL, catalog_conf
from icetide.config.secrets import redact, remember_secret, scrub
from icetide.errors import ConfigError
from icetide.spark.jars import aws_bundle_jar, iceberg_runtime_jar, icetide_jar, jdbc_driver_jar, pyspark_jars
from icetide.spark.java import check_java, java_executable
from icetide.spark.session import LOG4J_CONFIG

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.iceberg.rest.IcetideCatalogServer"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class ServedCatalog:
    """What a server serves: the catalog's name and its Iceberg properties (secrets included)."""

    name: str
    properties: dict[str, str] = field(repr=False)
    token: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        """The catalog's settings for a log line, secrets shown as ***."""
        return ", ".join(f"{k}={v}" for k, v in sorted(redact(self.properties).items()))


def served_catalog(
    name: str, *, warehouse: str | None, options: Mapping[str, str] | None, token: str | None = None
) -> ServedCatalog:
    """The catalog a server serves: the embedded one on `warehouse` (with icetide's commit lock)
    without `options`, else the catalog `options` describe, exactly as a Spark session opens it.
    A REST catalog is refused (serve the catalog behind it instead)."""
    if options and (options.get("type") == "rest" or "RESTCatalog" in str(options.get("catalog-impl", ""))):
        raise ConfigError("catalog: the pipeline's catalog is already a REST catalog; serve the catalog behind it")
    own_jar = icetide_jar()
    conf = catalog_conf(name, warehouse=warehouse, options=options, lock_impl=COMMIT_LOCK_IMPL if own_jar else None)
    prefix = f"spark.sql.catalog.{name}."
    properties = {k[len(prefix) :]: v for k, v in conf.items() if k.startswith(prefix)}
    if token:
        remember_secret(token)
    redact(properties)  # remembers the catalog's own secrets, for the server's output
    return ServedCatalog(name, properties, token)


def _command(catalog: ServedCatalog, host: str, port: int) -> list[str]:
    check_java()
    java = java_executable()
    own_jar = icetide_jar()
    if java is None or own_jar is None:
        raise ConfigError("catalog serve: needs a JDK (java and javac) to build icetide's catalog server")
    spark_jars, _ = pyspark_jars()
    classpath = [os.path.join(spark_jars, "*"), iceberg_runtime_jar(), own_jar]
    driver = jdbc_driver_jar(catalog.properties)
    if driver:
        classpath.append(driver)
    bundle = aws_bundle_jar(None, catalog.properties)
    if bundle:
        classpath.append(bundle)
    return [
        java,
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp",
        os.pathsep.join(classpath),
        SERVER_CLASS,
        host,
        str(port),
    ]


class CatalogServer:
    """A running server process; `uri` is where clients reach it."""

    def __init__(self, catalog: ServedCatalog, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        self.catalog = catalog
        self.host = host
        self.port = port
        self.uri = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self, *, timeout: float = START_TIMEOUT_SECONDS) -> str:
        """Start the server; returns its URI once it serves. A server that cannot start raises
        ConfigError with its one-line reason (secrets scrubbed)."""
        proc = subprocess.Popen(
            _command(self.catalog, self.host, self.port),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        settings = {"name": self.catalog.name, "properties": self.catalog.properties, "token": self.catalog.token}
        proc.stdin.write(json.dumps(settings) + "\n")
        proc.stdin.flush()  # kept open: the server exits when it closes, even if this process is killed
        errors: list[str] = []
        serving = threading.Event()
        relay = threading.Thread(target=_relay, args=(proc.stderr, errors, serving), daemon=True)
        relay.start()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            line = proc.stdout.readline()
        finally:
            timer.cancel()
        if not line.startswith("listening on "):
            proc.wait()
            relay.join(timeout=5)  # the reason is the server's last line on stderr
            reason = errors[-1] if errors else f"exited with code {proc.returncode}"
            raise ConfigError(f"catalog serve: the server did not start: {scrub(reason)}")
        self.uri = line.split(" ", 2)[2].strip()
        serving.set()
        threading.Thread(target=_relay, args=(proc.stdout, [], serving), daemon=True).start()
        log.info("serving catalog %s (%s) at %s", self.catalog.name, self.catalog.describe(), self.uri)
        return self.uri

    def wait(self) -> int:
        """Block until the server process ends; its exit code."""
        assert self._proc is not None
        return self._proc.wait()

    def stop(self) -> None:
        """End the server process (it holds no state: commits are the catalog's)."""
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _relay(stream: IO[str], keep: list[str], serving: threading.Event) -> None:
    """Pass the server's output lines on to this process's log, secrets scrubbed: warnings once
    it serves; before, debug lines (a failed start is reported by `start` itself)."""
    for line in stream:
        text = scrub(line.rstrip())
        if text:
            keep.append(text)
            log.log(logging.WARNING if serving.is_set() else logging.DEBUG, "catalog server: %s", text)


@contextmanager
def catalog_server(
    catalog: ServedCatalog, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> Iterator[CatalogServer]:
    """A server for the block, stopped after it."""
    server = CatalogServer(catalog, host=host, port=port)
    try:
        server.start()
        yield server
    finally:
        server.stop()
