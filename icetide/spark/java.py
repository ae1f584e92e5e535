"""Checks that a Java runtime Spark can use is present, before Spark tries and fails obscurely."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from icetide.errors import JavaNotFoundError

# Iceberg 1.12.0 is built for Java 17 (class files of version 61), and Spark 4 needs 17 too.
MIN_JAVA_VERSION = 17
INSTALL_HINT = "install Java 17, e.g. 'apt-get install openjdk-17-jre-headless', or set JAVA_HOME"


def jdk_tool(name: str) -> str | None:
    """A JDK program (java, javac): JAVA_HOME's first, then the PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", name)
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(name)


def java_executable() -> str | None:
    """The java binary Spark will launch."""
    return jdk_tool("java")


def parse_java_major(version_output: str) -> int | None:
    """The major version from `java -version` output ('1.8.0_392' -> 8, '17.0.15' -> 17)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):
        return int(match.group(2))
    return major


def check_java() -> int:
    """Return the Java major version, or raise JavaNotFoundError with one line saying what to do."""
    java = java_executable()
    if java is None:
        raise JavaNotFoundError(f"Java was not found: {INSTALL_HINT}")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"Java at {java} does not run ({exc}): {INSTALL_HINT}") from exc
    major = parse_java_major(done.stderr + done.stdout)
    if major is None:
        raise JavaNotFoundError(f"could not read the version of Java at {java}: {INSTALL_HINT}")
    if major < MIN_JAVA_VERSION:
        raise JavaNotFoundError(
            f"Java {major} at {java} is too old; Spark with Iceberg 1.12 needs "
            f"{MIN_JAVA_VERSION} or newer: {INSTALL_HINT}"
        )
    return major


if __name__ == "__main__":  # used by the Makefile before anything is installed
    import sys

    try:
        print(f"java {check_java()} ok")
    except JavaNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
