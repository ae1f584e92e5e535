"""Kafka Connect and Debezium's connectors by their Maven coordinates, pinned here and nowhere else
(tests and bench only).

`WORKER_ARTIFACTS`: Apache Kafka's own Connect runtime (`org.apache.kafka:connect-runtime`), the
JSON converter (`connect-json`) and what they need at run time, of the same release as the broker
(tests/kafka_jars.py, KAFKA_VERSION), plus `log4j-slf4j-impl` so the worker's log reaches a file.
`POSTGRES_CONNECTOR` and `MARIADB_CONNECTOR`: Debezium's connectors and their own dependencies,
each loaded from a plugin folder of its own (Connect's `plugin.path`, so each has its own class
loader and its own Debezium release), less the jars the worker provides to every plugin (Kafka's
API and clients, SLF4J, the compression codecs). PostgreSQL: 3.6.1.Final, built against Kafka
4.3.0. MariaDB: `io.debezium:debezium-connector-mariadb` 3.5.0.Final, the newest release of it on
Maven Central (no 3.6.x is there). Debezium has had a connector of its own for MariaDB since
2.7; the MySQL connector is not pinned, as no test runs it.

The resolution is recorded here so no Maven client is needed; each jar is fetched by icetide's
own Maven helper (icetide/spark/maven.py: checked against its SHA-256, cached in
`$ICETIDE_CACHE/maven`). To move: change the versions, resolve again (`mvn
dependency:copy-dependencies -DincludeScope=runtime -Dmdep.useRepositoryLayout=true` on a pom
naming connect-runtime, connect-json and log4j-slf4j-impl; one pom per connector) and write the
digests down.

`APICURIO_CONVERTER`: Avro through a Schema Registry. Confluent's
`io.confluent:kafka-connect-avro-converter` is not on Maven Central; Apicurio's
`io.apicurio:apicurio-registry-utils-converter` is (2.6.13.Final, the newest 2.x: its client
speaks Apicurio's v2 API, which tests/schema_registry_server.py serves beside Confluent's). Its
Avro serializer and registry client with their own dependencies, less the worker's jars (Kafka's
API, clients and JSON converter, SLF4J, the compression codecs) and less the JSON Schema serde
its `ExtJsonConverter` needs (not used). Its jars name no Connect plugin in a ServiceLoader
manifest, which the worker's `plugin.discovery=service_load` needs, so `PLUGIN_SERVICES` lists the
converter and tests/kafka_connect.py writes the manifest into the plugin's folder, as Kafka's
`connect-plugin-path sync-manifests` would.
"""

from __future__ import annotations

from icetide.spark.maven import Artifact

DEBEZIUM_VERSION = "3.6.1.Final"

WORKER_ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("at.yawk.lz4", "lz4-java", "1.10.2", "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866"),
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
        "com.fasterxml.jackson.datatype",
        "jackson-datatype-jdk8",
        "2.21.2",
        "e581bbf3fc5622d16b57366dd41e10fc56921fb202879de2ef487f87dd9b30e7",
    ),
    Artifact(
        "com.fasterxml.jackson.jakarta.rs",
        "jackson-jakarta-rs-base",
        "2.21.2",
        "40f4c57a2e6f34505338da188724e7ace7b343dde3964b76a12c993cdedad1af",
    ),
    Artifact(
        "com.fasterxml.jackson.jakarta.rs",
        "jackson-jakarta-rs-json-provider",
        "2.21.2",
        "ca969ea798efedc4b56589505fab51eb69c11a361b2e7583855593fc8690a666",
    ),
    Artifact(
        "com.fasterxml.jackson.module",
        "jackson-module-blackbird",
        "2.21.2",
        "5ed62cdcd357a24b73de9280e167aa014d7b4c17d04823844d482274cf07097e",
    ),
    Artifact(
        "com.fasterxml.jackson.module",
        "jackson-module-jakarta-xmlbind-annotations",
        "2.21.2",
        "f507551c823b137c8487275fc171652a78a4f083732e349e1d3cb42e568dd7e4",
    ),
    Artifact(
        "com.github.luben", "zstd-jni", "1.5.6-10", "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"
    ),
    Artifact(
        "com.sun.activation",
        "jakarta.activation",
        "2.0.1",
        "b9e24b7dd6e07495562ea96531be3130c96dba4d78e1dfd88adbbdebf4332871",
    ),
    Artifact(
        "io.github.classgraph",
        "classgraph",
        "4.8.179",
        "16558357f234052370109127a45d69a9bd6d8646925594792634486dc48b159d",
    ),
    Artifact(
        "io.swagger.core.v3",
        "swagger-annotations",
        "2.2.39",
        "ea3017076809f8104ff8a130dc4c12db8c67595aa1d978104a9beca8277a7d29",
    ),
    Artifact(
        "jakarta.activation",
        "jakarta.activation-api",
        "2.1.0",
        "56e8d994095fe49c28138c60291482f66f18d12ac2b720e938697dce6a3135c7",
    ),
    Artifact(
        "jakarta.annotation",
        "jakarta.annotation-api",
        "2.1.1",
        "5f65fdaf424eee2b55e1d882ba9bb376be93fb09b37b808be6e22e8851c909fe",
    ),
    Artifact(
        "jakarta.inject",
        "jakarta.inject-api",
        "2.0.1",
        "f7dc98062fccf14126abb751b64fab12c312566e8cbdc8483598bffcea93af7c",
    ),
    Artifact(
        "jakarta.servlet",
        "jakarta.servlet-api",
        "6.0.0",
        "c034eb1afb158987dbb53a5fea0cadf611c8dae8daadd59c44d9d5ab70129cef",
    ),
    Artifact(
        "jakarta.validation",
        "jakarta.validation-api",
        "3.0.2",
        "291c25e6910cc6a7ebd96d4c6baebf6d7c37676c5482c2d96146e901b62c1fc9",
    ),
    Artifact(
        "jakarta.ws.rs",
        "jakarta.ws.rs-api",
        "3.1.0",
        "6b3b3628b8b4aedda0d24c3354335e985497d8ef3c510b8f3028e920d5b8663d",
    ),
    Artifact(
        "jakarta.xml.bind",
        "jakarta.xml.bind-api",
        "3.0.1",
        "b8fb4bee3ff5b5c1ef77144d8411316018d7bbd41fcf1ede0646f7978546b867",
    ),
    Artifact(
        "javax.activation", "activation", "1.1.1", "ae475120e9fcd99b4b00b38329bd61cdc5eb754eee03fe66c01f50e137724f99"
    ),
    Artifact(
        "javax.activation",
        "javax.activation-api",
        "1.2.0",
        "43fdef0b5b6ceb31b0424b208b930c74ab58fac2ceeb7b3f6fd3aeb8b5ca4393",
    ),
    Artifact("javax.xml.bind", "jaxb-api", "2.3.1", "88b955a0df57880a26a74708bc34f74dcaf8ebf4e78843a28b50eae945732b06"),
    Artifact(
        "org.apache.kafka", "connect-api", "4.3.1", "5ce6158d453d2d84ab3509260fff872c67fb532a51519da6acafc6835bc48cfe"
    ),
    Artifact(
        "org.apache.kafka", "connect-json", "4.3.1", "ebd6d4900eb6835f30c6ce74b5f6d4a4fdc19e0a4a1de8da2f4463ea3ef20e41"
    ),
    Artifact(
        "org.apache.kafka",
        "connect-runtime",
        "4.3.1",
        "9df3d2f78f8a1740af358dd78ccdf1396559223e0cfbf1a697ab9363dead6175",
    ),
    Artifact(
        "org.apache.kafka",
        "connect-transforms",
        "4.3.1",
        "060bb300977304b53f9aebe79a3298c06a3d4240cb58b01e06eaa75abf4168eb",
    ),
    Artifact(
        "org.apache.kafka", "kafka-clients", "4.3.1", "52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36"
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
        "org.apache.maven",
        "maven-artifact",
        "3.9.15",
        "f154c31f15ac97c37b9cdf9f8d63cde5053c470d2daf54df7dfd3bb3c9e501c6",
    ),
    Artifact(
        "org.bitbucket.b_c", "jose4j", "0.9.6", "7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef"
    ),
    Artifact(
        "org.codehaus.plexus",
        "plexus-utils",
        "3.6.1",
        "05a63effd67e2d6b9d610cc82e2bd7473289d34802e57a529b28110f28af5679",
    ),
    Artifact(
        "org.eclipse.jetty.ee10",
        "jetty-ee10-servlet",
        "12.0.34",
        "08030501c5868ba348e0e349121cb3493586c29d438c725bf76b0559e8d5f5ed",
    ),
    Artifact(
        "org.eclipse.jetty.ee10",
        "jetty-ee10-servlets",
        "12.0.34",
        "bf9fe841e09f39d498838965b57e52b79f12e7bd5e259e645cc9e0a6cbe96426",
    ),
    Artifact(
        "org.eclipse.jetty",
        "jetty-alpn-client",
        "12.0.34",
        "dde78ab533961bb853a8ce5a23a90d4dd54cd6522e9e7f90566ca7f44e035ef9",
    ),
    Artifact(
        "org.eclipse.jetty",
        "jetty-client",
        "12.0.34",
        "b77b7535a809c78af71126b90aed0836cc9f9ac80d32e5cbf7a07025ace14401",
    ),
    Artifact(
        "org.eclipse.jetty", "jetty-http", "12.0.34", "63890ecc5bb8bf26c4dd0952ef2d0d3dd3f7434b37b21e51f7ea8dfbe96b9dc0"
    ),
    Artifact(
        "org.eclipse.jetty", "jetty-io", "12.0.34", "3704daeb82b39041ee5e6f810636c2fcb9a10476cdbf0fd067e584ed3110d66a"
    ),
    Artifact(
        "org.eclipse.jetty",
        "jetty-security",
        "12.0.34",
        "e9a595eff775859a5461c0ce05e27ace5182ee1fdc1b17016453fa41ca0e1560",
    ),
    Artifact(
        "org.eclipse.jetty",
        "jetty-server",
        "12.0.34",
        "fb7a1401b7b2358e9cb975764c54fac72fcecd7ae5199369041118603cd3fd7d",
    ),
    Artifact(
        "org.eclipse.jetty",
        "jetty-session",
        "12.0.34",
        "a161ae531c5d6a695f17a547fdf90746dcd929f1abac5c60c7061a6fb20d346f",
    ),
    Artifact(
        "org.eclipse.jetty", "jetty-util", "12.0.34", "3f8906cd72428d87dbbc0bd915192ce0f426e9db7805d3b0337588c1b6d7206e"
    ),
    Artifact(
        "org.glassfish.hk2.external",
        "aopalliance-repackaged",
        "3.0.6",
        "a82b6d1a348324ef88dc807c7cd7aaf633985cbff7b30036fb61a1b86981d840",
    ),
    Artifact(
        "org.glassfish.hk2", "hk2-api", "3.0.6", "c049a21a9fd9316c7e291a2bc28835f70d25affb623dc1599a83b6b84ec83a4f"
    ),
    Artifact(
        "org.glassfish.hk2", "hk2-locator", "3.0.6", "e2664d21b017c3aa1518b913264602bea604edc54d356103c10afba99abd04fc"
    ),
    Artifact(
        "org.glassfish.hk2", "hk2-utils", "3.0.6", "fc84d85a0744b576d9ec7db5845eeb998ed532a9450dd19c8c922c3ee6926206"
    ),
    Artifact(
        "org.glassfish.hk2",
        "osgi-resource-locator",
        "1.0.3",
        "aab5d7849f7cfcda2cc7c541ba1bd365151d42276f151c825387245dfde3dd74",
    ),
    Artifact(
        "org.glassfish.jersey.containers",
        "jersey-container-servlet",
        "3.1.10",
        "4aadc66d2d36afb273b3898581d6aa51e0f992308d56fd51b8e3201efa461f67",
    ),
    Artifact(
        "org.glassfish.jersey.containers",
        "jersey-container-servlet-core",
        "3.1.10",
        "fd15e7e37215d772ccdae8d4076c41a11ad3fec9ca88a1f8a8f6dacf4663bb69",
    ),
    Artifact(
        "org.glassfish.jersey.core",
        "jersey-client",
        "3.1.10",
        "96cf86c23b515da20a30a39633a920f12a420d1e5f02c55ef5577ca2694d11c6",
    ),
    Artifact(
        "org.glassfish.jersey.core",
        "jersey-common",
        "3.1.10",
        "b8df5de87d48d6abf555f340755a056c8cb29a660af958e959db8a4cb3552b54",
    ),
    Artifact(
        "org.glassfish.jersey.core",
        "jersey-server",
        "3.1.10",
        "1b33a9be417b72f7ceef3afe9780781b66122b0f1db78f2f82502988072cfab0",
    ),
    Artifact(
        "org.glassfish.jersey.inject",
        "jersey-hk2",
        "3.1.10",
        "00ed71c496a856ac1f73272482a7abe27b5a96b823c29cc08f4b708c8d3e647e",
    ),
    Artifact(
        "org.javassist", "javassist", "3.30.2-GA", "eba37290994b5e4868f3af98ff113f6244a6b099385d9ad46881307d3cb01aaf"
    ),
    Artifact("org.slf4j", "slf4j-api", "1.7.36", "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"),
    Artifact(
        "org.xerial.snappy",
        "snappy-java",
        "1.1.10.7",
        "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",
    ),
)
POSTGRES_CONNECTOR: tuple[Artifact, ...] = (
    Artifact(
        "com.datadoghq", "sketches-java", "0.8.2", "b24c3d175556eb381ef2b2f0a7dffe7cb1fb7a9f893f41260822b5ec6cb13cca"
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
        "com.fasterxml.jackson.datatype",
        "jackson-datatype-jsr310",
        "2.21.2",
        "a083d57cd1c4a28fefcc6bd071740779eb7fc1c22a3c1b40451b5477c443f02f",
    ),
    Artifact(
        "com.google.protobuf",
        "protobuf-java",
        "3.25.5",
        "8540247fad9e06baefa8fb45eb313802d019f485f14300e0f9d6b556ed88e753",
    ),
    Artifact(
        "io.debezium", "debezium-api", "3.6.1.Final", "893c73a44dd05b3a102830efb53b2636c63cfdf890860411dcc4969282c9544b"
    ),
    Artifact(
        "io.debezium",
        "debezium-config",
        "3.6.1.Final",
        "0d4b6335aca11e8ba40aa00d39b23b863ef968e79d47ed7a133b9461f8218405",
    ),
    Artifact(
        "io.debezium",
        "debezium-connect-plugins",
        "3.6.1.Final",
        "712d34752f945fb4062354a9faf04424dd3660411137b3bb160b0a68d4a7ee8e",
    ),
    Artifact(
        "io.debezium",
        "debezium-connector-common",
        "3.6.1.Final",
        "365a695d512b085cff2cd12e28e44a7a3e733b43bfb27f3608508d7800e2de45",
    ),
    Artifact(
        "io.debezium",
        "debezium-connector-postgres",
        "3.6.1.Final",
        "e7bb97f00f97ec78d7c39b19e2b0797739438433b6acaa0941e18dbc2da0d854",
    ),
    Artifact(
        "io.debezium",
        "debezium-openlineage-api",
        "3.6.1.Final",
        "7e7e0fb3c3a12b3e8bfe2d42df278ff2a9fab8c58fa12199590e35fdb88b2062",
    ),
    Artifact(
        "io.debezium",
        "debezium-util",
        "3.6.1.Final",
        "9501581790412207cda72b2b57874e0430e2f9e4c5e94a054f7b06e07c112e5f",
    ),
    Artifact(
        "jakarta.ws.rs",
        "jakarta.ws.rs-api",
        "3.1.0",
        "6b3b3628b8b4aedda0d24c3354335e985497d8ef3c510b8f3028e920d5b8663d",
    ),
    Artifact(
        "org.postgresql", "postgresql", "42.7.11", "1981b31d3993c58702783c1cddf10a34e48c1f413d70ff1cb6def0a143484647"
    ),
)
MARIADB_CONNECTOR: tuple[Artifact, ...] = (
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.19.0",
        "ead60e9cac0e42b57092b9e2d087ff43536e9477d4486ba393037a8cc156cda7",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.19.0",
        "da8e859bac94874528116a25f20c68560e4287acbf27628711b8a4f96b028430",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.19.0",
        "ceda311f476c3b18e1d2b240c94e2dcb9c8d44e70f8afa9facab88bac4ddc03a",
    ),
    Artifact(
        "com.fasterxml.jackson.datatype",
        "jackson-datatype-jsr310",
        "2.19.0",
        "0ee97bf32936349d6a4cf6d8428533bf4a4b5b3e7e55fd9a4f19508ce062a775",
    ),
    Artifact(
        "io.debezium", "debezium-api", "3.5.0.Final", "d1267b742b9a83b5c0c3e24d417f75c93dc5d4640d5fcee7d24390a0ddf96cb3"
    ),
    Artifact(
        "io.debezium",
        "debezium-config",
        "3.5.0.Final",
        "9430a5bb4dc9f6ee12015c3e3925f14a3e07906ccdf005a295be116ea5e0d5c8",
    ),
    Artifact(
        "io.debezium",
        "debezium-connect-plugins",
        "3.5.0.Final",
        "0c8579e75dbe0f4993a87fe8e85baa39b87170412348121dc67837740d080dbf",
    ),
    Artifact(
        "io.debezium",
        "debezium-connector-binlog",
        "3.5.0.Final",
        "802a269457f5ca2eadec2332ec778006dcae634ba8d0b6ee7364beac91fa2b12",
    ),
    Artifact(
        "io.debezium",
        "debezium-connector-common",
        "3.5.0.Final",
        "68b87943d99eb36c2c9639c132ff3528eed87e057d137df93e60d291db149dd4",
    ),
    Artifact(
        "io.debezium",
        "debezium-connector-mariadb",
        "3.5.0.Final",
        "6ea239f23d74486a77e89cceae11120f208e9f832ccdff9d88cb629ce298e890",
    ),
    Artifact(
        "io.debezium",
        "debezium-ddl-parser",
        "3.5.0.Final",
        "41dc0fb39cd0366cff67b02fa3e89ca83664d6748154737c18d2b2502a6a32b5",
    ),
    Artifact(
        "io.debezium",
        "debezium-openlineage-api",
        "3.5.0.Final",
        "ac6ec9bbcae42cb5bc05200f9f2c5268d591b6abadc2ec209df7cffdcdc5f5fe",
    ),
    Artifact(
        "io.debezium",
        "debezium-storage-file",
        "3.5.0.Final",
        "ffdacc74d296dda0ce37e5a67812e1ebdc56945bc23076a5d71949a6828d8ed7",
    ),
    Artifact(
        "io.debezium",
        "debezium-storage-kafka",
        "3.5.0.Final",
        "dc36614e975459a82192f81fb1b273845ba4e242a675d6322ceb6700d6f47801",
    ),
    Artifact(
        "io.debezium",
        "debezium-util",
        "3.5.0.Final",
        "ca5ba9a7f89b0a3f6f38ea37e88ac77fdc64b508a44ea5fc9b6a19cce22a7234",
    ),
    Artifact(
        "io.debezium",
        "mysql-binlog-connector-java",
        "0.40.6",
        "0bb2363f3632afa4bd84b38b1a9cf9c2918a9eff98c62943f679c8312ff58dcc",
    ),
    Artifact(
        "jakarta.ws.rs",
        "jakarta.ws.rs-api",
        "3.1.0",
        "6b3b3628b8b4aedda0d24c3354335e985497d8ef3c510b8f3028e920d5b8663d",
    ),
    Artifact(
        "org.antlr", "antlr4-runtime", "4.10.1", "da66be0c98acfb29bc708300d05f1a3269c40f9984a4cb9251cf2ba1898d1334"
    ),
    Artifact(
        "org.mariadb.jdbc",
        "mariadb-java-client",
        "3.5.3",
        "85c4ba2f221d0dfd439c26affbb294f784960763544263c65aba9c2c76858706",
    ),
)

APICURIO_CONVERTER: tuple[Artifact, ...] = (
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.16.2",
        "d1cdd269ebaa753d1842933194e17d61958f058952d63e03dbfb3d1d78a6926e",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.17.2",
        "721a189241dab0525d9e858e5cb604d3ecc0ede081e2de77d6f34fa5779a5b46",
    ),
    Artifact(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.16.2",
        "53b6025d98c357068296e4b134242443a248c2c582800879f1c4ea93b54bafa6",
    ),
    Artifact(
        "commons-codec", "commons-codec", "1.17.0", "f700de80ac270d0344fdea7468201d8b9c805e5c648331c3619f2ee067ccfc59"
    ),
    Artifact("commons-io", "commons-io", "2.16.1", "f41f7baacd716896447ace9758621f62c1c6b0a91d89acee488da26fc477c84f"),
    Artifact(
        "io.apicurio",
        "apicurio-common-rest-client-common",
        "0.1.18.Final",
        "7e73da0b5bd1cff35ff24f2172d41b79ef55362dbbd6104c5d5108ffed87dcd7",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-common-rest-client-jdk",
        "0.1.18.Final",
        "ef1feac9226e31722444f608ad5d998e0d0753ed886a6decad19effe23d9b734",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-client",
        "2.6.13.Final",
        "3b06edde267fbf98207fcab297679b25475d62f4b31aa54612eb0e44f1804ad2",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-common",
        "2.6.13.Final",
        "1f08d5cfdf183be38f53df9e4ed72cb11f7923405ba7f2b3043f334fe6c732df",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-schema-resolver",
        "2.6.13.Final",
        "171a974f39df803e0084c962b80b58a2e40645cb08e8297bdbbe34c2ef61a3c1",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-serde-common",
        "2.6.13.Final",
        "5f5e0e834699516be7b39ee6cdefa138a417758bbf66e28950158a7232014e76",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-serdes-avro-serde",
        "2.6.13.Final",
        "71e2a474b6ef82b94d161eed801bc6570a31b324e6872e7c19e09c3b10bc3ad1",
    ),
    Artifact(
        "io.apicurio",
        "apicurio-registry-utils-converter",
        "2.6.13.Final",
        "95392390745e31941e3f8e3565f883a2c31b9fd1d38eb0e22aac7721dd73508a",
    ),
    Artifact("org.apache.avro", "avro", "1.12.0", "1f5fbfff9b7427d6832cc3031a3c81413d3e21d9e2551847d9231c28493f9492"),
    Artifact(
        "org.apache.commons",
        "commons-compress",
        "1.26.2",
        "9168a03141d8fc7eda21a2360d83cc0412bcbb1d6204d992bd48c2573cb3c6b8",
    ),
    Artifact(
        "org.apache.commons",
        "commons-lang3",
        "3.14.0",
        "7b96bf3ee68949abb5bc465559ac270e0551596fa34523fddf890ec418dde13c",
    ),
)
APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"

# Each plugin's folder name and jars: the connectors, and the Avro converter.
CONNECTOR_PLUGINS: dict[str, tuple[Artifact, ...]] = {
    "debezium-connector-postgres": POSTGRES_CONNECTOR,
    "debezium-connector-mariadb": MARIADB_CONNECTOR,
    "apicurio-registry-converter": APICURIO_CONVERTER,
}
# The ServiceLoader manifests a plugin's jars lack: plugin folder -> {service interface: classes}.
PLUGIN_SERVICES: dict[str, dict[str, tuple[str, ...]]] = {
    "apicurio-registry-converter": {"org.apache.kafka.connect.storage.Converter": (APICURIO_AVRO_CONVERTER,)},
}


def fetch_worker_jars() -> list[str]:
    """The Connect worker's jars on this machine, fetched now unless they are here; their paths."""
    from icetide.spark.maven import fetch

    return [fetch(artifact) for artifact in WORKER_ARTIFACTS]


def fetch_connector_jars() -> dict[str, list[str]]:
    """Each connector plugin's jars on this machine (fetched now unless here), by plugin folder."""
    from icetide.spark.maven import fetch

    return {plugin: [fetch(a) for a in artifacts] for plugin, artifacts in CONNECTOR_PLUGINS.items()}


if __name__ == "__main__":
    fetch_worker_jars()
    fetch_connector_jars()
