"""Iceberg's Kafka Connect sink by its Maven coordinates, pinned here and nowhere else.

Iceberg publishes the sink to Maven Central as `org.apache.iceberg:iceberg-kafka-connect` (1.12.0,
the newest release, with `iceberg-kafka-connect-events`) but not its runtime bundle: the
`iceberg-kafka-connect-runtime` distribution (a zip of the sink with Hadoop, ORC, Parquet and the
AWS, GCP and Azure clients) is built by Iceberg's Gradle and has no Maven artifact. So the plugin
is the sink's own dependency tree plus what it needs for a Hadoop catalog on a local folder
writing Parquet: `iceberg-parquet` (a compile-only dependency of `iceberg-data`) and Hadoop's
shaded client 3.4.1 (`hadoop-client-api`, `hadoop-client-runtime`, the same jars the Flink peer
runs). Left out: what the Connect worker gives every plugin (Kafka's API and clients, SLF4J), and
ORC (`orc-core` is published with a `nohive` classifier the project's fetcher does not name; no
table here is ORC).

Resolved with `mvn dependency:copy-dependencies -DincludeScope=runtime
-Dmdep.useRepositoryLayout=true` on a throwaway pom naming iceberg-kafka-connect 1.12.0,
iceberg-parquet 1.12.0, hadoop-client-api 3.4.1 and hadoop-client-runtime 3.4.1; each jar is
fetched by icetide's own fetcher (icetide/spark/maven.py: checked against its SHA-256, cached in
`$ICETIDE_CACHE/maven`). To move: change the versions, resolve again and write the digests down.
"""

from __future__ import annotations

from bench.peers.flink.peer import HADOOP_CLIENT
from icetide.spark.maven import Artifact, fetch

ICEBERG_KAFKA_CONNECT_VERSION = "1.12.0"

SINK_ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.22",
        "21ddb598807d3a51a876704eb979d9296e1c6a6f47ab1826ff88c6d6a127a2d0",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.22.2",
        "ff167a6317be15895706c26668f45b898efe40ab8780970658210fe1393d52a6",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.22.2",
        "d0da14c12b16b5d54719aa172d83b542ff4abeb8b0fb7db476fde8ceece760ca",
    ),
    Artifact(
        "com.github.ben-manes.caffeine",
        "caffeine",
        "3.2.4",
        "9d9d2cfd681fd9272ded3d27c9930db12f89f732345975aa113ebc223bbf1224",
    ),
    Artifact(
        "com.github.luben",
        "zstd-jni",
        "1.5.7-3",
        "a38a4a97f1b43b878c91e0dd7f1e3d17f0e70beec71d95bacaf56a2f207624a3",
    ),
    Artifact(
        "com.google.code.findbugs",
        "jsr305",
        "3.0.2",
        "766ad2a0783f2687962c8ad74ceecc38a28b9f72a2d085ee438b7813e928d0c7",
    ),
    Artifact(
        "com.google.errorprone",
        "error_prone_annotations",
        "2.49.0",
        "3b1003e51b8ae56fdbd7c71073e81d1683b97e6c4dff5a9151164d59b769d13c",
    ),
    Artifact(
        "commons-codec",
        "commons-codec",
        "1.19.0",
        "5c3881e4f556855e9c532927ee0c9dfde94cc66760d5805c031a59887070af5f",
    ),
    Artifact(
        "commons-io",
        "commons-io",
        "2.20.0",
        "df90bba0fe3cb586b7f164e78fe8f8f4da3f2dd5c27fa645f888100ccc25dd72",
    ),
    Artifact(
        "commons-logging",
        "commons-logging",
        "1.2",
        "daddea1ea0be0f56978ab3006b8ac92834afeefbd9b7e4e6316fca57df0fa636",
    ),
    Artifact(
        "commons-pool",
        "commons-pool",
        "1.6",
        "46c42b4a38dc6b2db53a9ee5c92c63db103665d56694e2cfce2c95d51a6860cc",
    ),
    Artifact(
        "io.airlift",
        "aircompressor",
        "2.0.3",
        "b86bb66f610079e0bf790d62e2ff68853eb0dc4748a6d68ae28bce92b68094aa",
    ),
    Artifact(
        "javax.annotation",
        "javax.annotation-api",
        "1.3.2",
        "e04ba5195bcd555dc95650f7cc614d151e4bcd52d29a10b8aa2197f3ab89ab9b",
    ),
    Artifact(
        "org.apache.avro",
        "avro",
        "1.12.2",
        "6522e2a146b859ad158bb024dcc3b0bc826680794a2523b0881dafcbd59ce2df",
    ),
    Artifact(
        "org.apache.commons",
        "commons-compress",
        "1.28.0",
        "e1522945218456f3649a39bc4afd70ce4bd466221519dba7d378f2141a4642ca",
    ),
    Artifact(
        "org.apache.commons",
        "commons-lang3",
        "3.12.0",
        "d919d904486c037f8d193412da0c92e22a9fa24230b9d67a57855c5c31c7e94e",
    ),
    *HADOOP_CLIENT,  # pinned once, beside the Flink peer's
    Artifact(
        "org.apache.httpcomponents.client5",
        "httpclient5",
        "5.6.4",
        "bdef5f8841145cd76c4c605ff301bc840eea0d5292332b7b892a93316c0d8ee1",
    ),
    Artifact(
        "org.apache.httpcomponents.core5",
        "httpcore5",
        "5.4.3",
        "18bfbbabb478dfb67f31aeaf428c387f3c3df654582e1309f708ee1f3086830a",
    ),
    Artifact(
        "org.apache.httpcomponents.core5",
        "httpcore5-h2",
        "5.4.3",
        "c7db7026b8e2dea39132b04a6069f6671e2858309b20a146ec5c7dd6ed73a0b6",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-api",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "d476a6989edfe3882a47ce0eaa3e53df4d589ef5e7bd0a16ff113ae570bca8b6",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-bundled-guava",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "8d27e319e3bc28f7f86e7fbd59f6758bfaa1f78d72d9f76aa93ad1f7cbd3ba34",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-common",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "18a43330e3c5eb712a9bf88e8f70441971851400efb4646f0b6512ac40c5f357",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-core",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "d3bbb331b7a907e134958d21ecccd91a736049e00768e07579ff60855bf28352",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-data",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "1c53acbfddce3c94695cda22acb8274cb4f23a8cd136d0275927ec8a3f1fa605",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-kafka-connect",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "40b236ef77903efbdf8b500f6a3eb56cf245fb8b6b03c53b9b46c7c2ff2f0b37",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-kafka-connect-events",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "5d5f4f51f3e38431c11539621e70601dc463a0598099a54222f37f35a6841df0",
    ),
    Artifact(
        "org.apache.iceberg",
        "iceberg-parquet",
        ICEBERG_KAFKA_CONNECT_VERSION,
        "fba0355f0d54bd68e21170e0e5f05632845d42ba346945017d2156e66297b85f",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-avro",
        "1.17.1",
        "ecb51da201df8266970af66686f9cb9df58db6702e0128e211d1a8d5050f6021",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-column",
        "1.17.1",
        "25c4be0714581a5b33f6862ec972da30b9dd864ecb5b86698b288d0eb0d5b089",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-common",
        "1.17.1",
        "844c5779c5071a95cbc410d711eff408589cbecd6e7063d75a88dd47dbc582f1",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-encoding",
        "1.17.1",
        "afc8ca7c319c3ff21eb58f900dae067e36ef472f7c74d578ccf7a656f13f0908",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-format-structures",
        "1.17.1",
        "8e12f3d99de417fec077d858fe6f84daa79fdbfdc0753075843801118853a29b",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-hadoop",
        "1.17.1",
        "2aeb5e21fb12ddc51fc8c69050906446d9c261c28b0446abf2e40d80cfc8e0a0",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-jackson",
        "1.17.1",
        "bc1879dd3b81200d8925e8e61ccee59a48867f6f567039b8b86f4fb36041ac5e",
    ),
    Artifact(
        "org.apache.parquet",
        "parquet-variant",
        "1.17.1",
        "766fe23a18247569bdcbb5fee0f5d709ed37c0efde22893206b1101f49817c9c",
    ),
    Artifact(
        "org.jspecify",
        "jspecify",
        "1.0.0",
        "1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab",
    ),
    Artifact(
        "org.locationtech.jts",
        "jts-core",
        "1.20.0",
        "6a783d8f9dba3d3cf7265435f134402f63c05838aa6cbcc4297ad3a5b2842baf",
    ),
    Artifact(
        "org.roaringbitmap",
        "RoaringBitmap",
        "1.6.23",
        "3f066de14a15c782ef24cd305cc7e90406e887913b9f8a6e08f342c566270f2a",
    ),
    Artifact(
        "org.threeten",
        "threeten-extra",
        "1.7.1",
        "9bbcbe09a631320bdc3325bbb04c93068473bc0e04b85e2ef3e42314d5a7dacf",
    ),
    Artifact(
        "org.xerial.snappy",
        "snappy-java",
        "1.1.10.4",
        "55b30c94e5c4cc2d4b6976916098d0678a8a6cc7427fa8c875621bd94e731ac8",
    ),
)


def fetch_sink_jars() -> list[str]:
    """The sink plugin's jars on this machine, fetched now unless they are here; their paths."""
    return [fetch(artifact) for artifact in SINK_ARTIFACTS]


if __name__ == "__main__":
    fetch_sink_jars()
