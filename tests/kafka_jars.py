"""Apache Kafka's broker by its Maven coordinates, pinned here and nowhere else (tests and bench only).

`org.apache.kafka:kafka_2.13` and the jars it needs at run time, as Maven resolves them (the
resolution is recorded here so no Maven client is needed), plus `log4j-slf4j-impl` so the broker's
log reaches a file. Each jar is fetched once by icetide's own Maven helper (icetide/spark/maven.py:
checked against its SHA-256, cached in `$ICETIDE_CACHE/maven`).

Kafka 4.3.1: the newest patch of the line Debezium 3.6.1 (the project's CDC connectors) is built
against (`version.kafka` 4.3.0 in io.debezium:debezium-build-parent:3.6.1.Final), so a Connect
worker taken from the same release as this broker matches the connectors. Maven Central also
serves 4.4.0, the newest line, not yet built against by Debezium. To move: change the versions,
resolve again (`mvn dependency:copy-dependencies -Dmdep.useRepositoryLayout=true` on a pom naming
kafka_2.13 and log4j-slf4j-impl) and write the digests down.
"""

from __future__ import annotations

from icetide.spark.maven import Artifact

KAFKA_VERSION = "4.3.1"
SCALA_VERSION = "2.13"

BROKER_ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("at.yawk.lz4", "lz4-java", "1.10.2", "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866"),
    Artifact(
        "com.dynatrace.hash4j", "hash4j", "0.22.0", "23028a3fd006e530bf495f551083208187cafd8f80624d048eba56442f16a50e"
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.21",
        "53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.21.2",
        "12e8655b100267b44d0f14d01b1f5082a5105e616174dc4307be1a761e92407b",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.21.2",
        "8c982f01f148d805f0aaac2339011244757e0df7c6ff8951f2fa3f433b8ed849",
    ),
    Artifact(
        "com.fasterxml.jackson.dataformat",
        "jackson-dataformat-csv",
        "2.21.2",
        "682f8c7977e02a42748426bf54946e32e52e2f80b84b6642801ab12bd541368a",
    ),
    Artifact(
        "com.fasterxml.jackson.dataformat",
        "jackson-dataformat-yaml",
        "2.21.2",
        "d25551812fa0c14f37cabaa9401e63eadcea42ce36311183af5622d5bc8a1bc7",
    ),
    Artifact(
        "com.fasterxml.jackson.datatype",
        "jackson-datatype-jdk8",
        "2.21.2",
        "e581bbf3fc5622d16b57366dd41e10fc56921fb202879de2ef487f87dd9b30e7",
    ),
    Artifact(
        "com.github.ben-manes.caffeine",
        "caffeine",
        "3.2.0",
        "ec411dfdf0c03f25218648ce89861630b71680e5858a9a7278ebac8e55cab3d7",
    ),
    Artifact(
        "com.github.luben", "zstd-jni", "1.5.6-10", "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"
    ),
    Artifact("com.google.re2j", "re2j", "1.8", "7b52c72156dd7f98b3237a5b35c1d34fba381b21048c89208913ad80a45dfbd7"),
    Artifact(
        "com.typesafe.scala-logging",
        "scala-logging_2.13",
        "3.9.6",
        "0ad0c3f4d89d538b3b6c300158555e266aa69cf1b5f6522aba8b5bad238eb994",
    ),
    Artifact(
        "com.yammer.metrics",
        "metrics-core",
        "2.2.0",
        "6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c",
    ),
    Artifact(
        "commons-beanutils",
        "commons-beanutils",
        "1.11.0",
        "9e44ba68ec9a3f21286fa2a8bbb003b735c0f69101bb43144b79f4f8aaa74709",
    ),
    Artifact(
        "commons-collections",
        "commons-collections",
        "3.2.2",
        "eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8",
    ),
    Artifact(
        "commons-digester",
        "commons-digester",
        "2.1",
        "e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d",
    ),
    Artifact(
        "commons-logging",
        "commons-logging",
        "1.3.5",
        "6d7a744e4027649fbb50895df9497d109f98c766a637062fe8d2eabbb3140ba4",
    ),
    Artifact(
        "commons-validator",
        "commons-validator",
        "1.10.1",
        "ed74711a78d793ca37f6075e4a1e93d107233dfd20d0bb17e32bad88d38e56aa",
    ),
    Artifact(
        "net.sf.jopt-simple", "jopt-simple", "5.0.4", "df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28"
    ),
    Artifact(
        "net.sourceforge.argparse4j",
        "argparse4j",
        "0.7.0",
        "65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-clients",
        KAFKA_VERSION,
        "52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-coordinator-common",
        KAFKA_VERSION,
        "66a86b8c89718216ffa72fe4e44b9d1bdf3472e4cb9200c36a0742a25febbdba",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-group-coordinator-api",
        KAFKA_VERSION,
        "d81bc1a3739ff6c9b21815baae00022306342a16d3d94e6a2621201b9980a30d",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-group-coordinator",
        KAFKA_VERSION,
        "4ab56d002e1624185c874199e9e0ffb243dbeb9f68b4d0cadf48ce2f617a1126",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-metadata",
        KAFKA_VERSION,
        "4d73a96c6474a4ebdd67a1cee14da1a94cfd6bb9e6e252685ba5667d8ab7f898",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-raft",
        KAFKA_VERSION,
        "46abbf89806dd22d848e997cdfb1431524cab4ec88e38a7d2806e20b24a70609",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-server-common",
        KAFKA_VERSION,
        "d7c719f749579a399011f0df7414de8a78f10f074a6122caa550fdb141351575",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-server",
        KAFKA_VERSION,
        "01d736599ec3b0cdbb0480c15219170b28cdae189785e7f0c6f1f26e528eaebc",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-share-coordinator",
        KAFKA_VERSION,
        "8ceeed7346127e652ea5c650b217890aaff14919f967d27fadce420745bd3066",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-storage-api",
        KAFKA_VERSION,
        "bc2b22639fa554494461d101d599e01bae840d97c4f46e18fdf3d2fe41a47098",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-storage",
        KAFKA_VERSION,
        "97e3facddd2914a58f28ec91ef35f8da69963eab3651196e97f487924f6dac98",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-tools-api",
        KAFKA_VERSION,
        "dcf6785742e0c8ab11a0fc09c62f1192e11e997dc629669a8db82aa40d933c31",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka-transaction-coordinator",
        KAFKA_VERSION,
        "c64aaa2a88d8fd382c4800204872917686e542043c7916c9e8797d939d8eb313",
    ),
    Artifact(
        "org.apache.kafka",
        "kafka_2.13",
        KAFKA_VERSION,
        "b098abef5ff878e76f60cd6c559b9baa5663ccb1b55f2837558b22c329d32423",
    ),
    Artifact(
        "org.apache.logging.log4j",
        "log4j-api",
        "2.25.4",
        "c4b642a7f047275215de117e0e3847eb2c7711d84a0aa7433e7b3c096daf341d",
    ),
    Artifact(
        "org.apache.logging.log4j",
        "log4j-core",
        "2.25.4",
        "10fee2c0485d54fa44ee75d314f6295508f7b932281873db61a91b88073200e6",
    ),
    Artifact(
        "org.apache.logging.log4j",
        "log4j-slf4j-impl",
        "2.25.4",
        "7ac68a0afcc83d54f48d116d79370a43f0a2a6b71b5c1d6dda943bb6a95ddbaa",
    ),
    Artifact(
        "org.bitbucket.b_c", "jose4j", "0.9.6", "7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef"
    ),
    Artifact(
        "org.hdrhistogram", "HdrHistogram", "2.2.2", "22d1d4316c4ec13a68b559e98c8256d69071593731da96136640f864fa14fad8"
    ),
    Artifact("org.jspecify", "jspecify", "1.0.0", "1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab"),
    Artifact(
        "org.pcollections", "pcollections", "4.0.2", "2bbeef5797a241300c4f7513cd546239629ed7deda4fc0c31df90bb95f5f13ef"
    ),
    Artifact(
        "org.scala-lang", "scala-library", "2.13.18", "4e85d96ff7bc7dc627985523c3541b9917aaa08e956391380c42db21a2c4e5a0"
    ),
    Artifact(
        "org.scala-lang", "scala-reflect", "2.13.18", "6935ff1982b2ac93d695f15aa66921be2f602921277afe002f018fd8c7d6e29b"
    ),
    Artifact("org.slf4j", "slf4j-api", "1.7.36", "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"),
    Artifact(
        "org.xerial.snappy",
        "snappy-java",
        "1.1.10.7",
        "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",
    ),
    Artifact("org.yaml", "snakeyaml", "2.5", "e6682acf1ace77508ef13649cbf4f8d09d2cf5457bdb61d25ffb6ac0233d78dd"),
)


def fetch_broker_jars() -> list[str]:
    """The broker's jars on this machine, fetched now unless they are here; their paths."""
    from icetide.spark.maven import fetch

    return [fetch(artifact) for artifact in BROKER_ARTIFACTS]


if __name__ == "__main__":  # `make test` fetches them before the test processes start
    from tests.connect_jars import fetch_connector_jars, fetch_worker_jars

    fetch_broker_jars()
    fetch_worker_jars()  # and Kafka Connect's, with Debezium's connectors (tests/connect_jars.py)
    fetch_connector_jars()
