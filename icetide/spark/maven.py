"""icetide's JVM dependencies, by their Maven coordinates, pinned here and nowhere else.

Each artifact is named by `group:artifact:version` with the SHA-256 of its jar, and fetched once
from Maven Central (or the mirror in $ICETIDE_MAVEN_REPOSITORY) into `$ICETIDE_CACHE/maven`
(default `~/.cache/icetide/maven`), laid out as a Maven repository. A jar already in the local
Maven repository (`~/.m2/repository`) with the pinned digest is used in place. A download is
checked against the digest before it is renamed into place, so a reader never sees a partial or
altered jar. `make install` runs `python -m icetide.spark.jars`, which fetches what the installed
PySpark needs, so tests and the demo start offline afterwards.

Iceberg 1.12.0 is the newest release with runtimes for both Spark lines icetide supports: 4.1
(the default) and 3.5. It ships no runtime for Spark 4.0 (1.11.0 was the last), none for 4.2 yet.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from icetide.errors import DependencyError

log = logging.getLogger(__name__)

ICEBERG_VERSION = "1.12.0"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "ICETIDE_MAVEN_REPOSITORY"
CACHE_ENV = "ICETIDE_CACHE"
FETCH_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Artifact:
    """One jar on Maven Central, pinned by version and content."""

    group: str
    name: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        """`group:artifact:version`, as `spark.jars.packages` and `--packages` take it."""
        return f"{self.group}:{self.name}:{self.version}"

    @property
    def path(self) -> str:
        """The jar's path inside a Maven repository."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.name}-{self.version}.jar"


# The Iceberg Spark runtime per (Spark line, Scala version) of the installed PySpark.
ICEBERG_RUNTIMES: dict[tuple[str, str], Artifact] = {
    ("4.1", "2.13"): Artifact(
        "org.apache.iceberg",
        "iceberg-spark-runtime-4.1_2.13",
        ICEBERG_VERSION,
        "3123c3798af642dd537230923548e013ef41cc28b6626e5225808cf5670a0f82",
    ),
    ("3.5", "2.12"): Artifact(
        "org.apache.iceberg",
        "iceberg-spark-runtime-3.5_2.12",
        ICEBERG_VERSION,
        "8dd8c90e54ed1a20f2461309d047a255ee56382eb7c0a46162b27a4936fd86dc",
    ),
}
# S3FileIO's AWS SDK (the runtime has S3FileIO but not the SDK); of the same release as the runtime.
ICEBERG_AWS_BUNDLE = Artifact(
    "org.apache.iceberg",
    "iceberg-aws-bundle",
    ICEBERG_VERSION,
    "dd7e49ffa4ac9b215bed846581991259e3aec9bb2fa08d6cec029c46cd66d957",
)
POSTGRESQL_JDBC = Artifact(
    "org.postgresql", "postgresql", "42.7.14", "73914527305a40cce504b0d3d90b23caf565136912d607ae8ae7c5895512332c"
)
SQLITE_JDBC = Artifact(
    "org.xerial", "sqlite-jdbc", "3.54.1.0", "f8dce420a6016278497f4f0560f65602b9db858de141b541cf91a4644ebe4639"
)


def cache_dir() -> str:
    """Where fetched and built jars are kept: $ICETIDE_CACHE, else ~/.cache/icetide."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "icetide")


def repository() -> str:
    """The Maven repository jars are fetched from: $ICETIDE_MAVEN_REPOSITORY, else Maven Central."""
    return (os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL).rstrip("/")


def _digest(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def cached_jar(artifact: Artifact) -> str | None:
    """The artifact's jar on this machine, if it is here with its pinned digest (no network)."""
    target = os.path.join(cache_dir(), "maven", artifact.path)
    if os.path.isfile(target):
        return target
    local = os.path.join(os.path.expanduser("~"), ".m2", "repository", artifact.path)
    if os.path.isfile(local) and _digest(local) == artifact.sha256:
        return local
    return None


def fetch(artifact: Artifact) -> str:
    """Path of the artifact's jar, fetched now unless this machine has it.

    Raises DependencyError, one line naming the coordinates, the repository and what to do,
    when the repository cannot be reached or serves other bytes than the pinned ones.
    """
    found = cached_jar(artifact)
    if found:
        return found
    target = os.path.join(cache_dir(), "maven", artifact.path)
    url = f"{repository()}/{artifact.path}"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    staged = f"{target}.{os.getpid()}.part"
    log.info("fetching %s from %s", artifact.coordinates, repository())
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response, open(staged, "wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        actual = _digest(staged)
        if actual != artifact.sha256:
            raise DependencyError(
                f"{artifact.coordinates}: {url} served a jar whose SHA-256 is {actual}, not the pinned "
                f"{artifact.sha256}; check {REPOSITORY_ENV}"
            )
        os.replace(staged, target)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = f"HTTP {exc.code}" if isinstance(exc, urllib.error.HTTPError) else getattr(exc, "reason", None) or exc
        raise DependencyError(
            f"cannot fetch {artifact.coordinates} from {repository()} ({reason}): check the network, or set "
            f"{REPOSITORY_ENV} to a Maven mirror"
        ) from exc
    finally:
        if os.path.exists(staged):
            os.remove(staged)
    return target
