"""Secrets: which names are secret, redacted reprs and logs, `${ENV_VAR}` in pipeline files,
and a Hadoop catalog refused on an object store. Pure Python: no Spark."""

from __future__ import annotations

import copy
import io
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.catalog.settings import catalog_conf
from icetide.config.pipeline import PipelineConfig, load_config
from icetide.config.secrets import REDACTED, RedactingFilter, expand_env, is_secret_name, redact, scrub
from icetide.errors import ConfigError
from icetide.sources.kafka import KafkaSourceConfig
from tests.test_config import GOOD

SECRET = "s3cr3t-Value-42"


@pytest.mark.parametrize(
    "name",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "s3.secret-access-key",
        "s3.access-key-id",
        "token",
        "credential",
        "sasl.oauthbearer.client.secret",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "fs.azure.account.key.acct.dfs.core.windows.net",
        "adls.auth.shared-key.account.key",
        "accessToken",
        "api_key",
        "PASSWORD",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "key",
        "key.deserializer",
        "value.deserializer",
        "ssl.key.location",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "bootstrap.servers",
        "sasl.username",
        "sasl.mechanism",
        "uri",
        "warehouse",
        "type",
        "client.id",
        "spark.sql.shuffle.partitions",
        "io-impl",
    ],
)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def _kafka_doc() -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    doc["source"]["kafka"]["consumer"] = {
        "security.protocol": "SASL_SSL",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.key.password": SECRET + "-ssl",
    }
    doc["catalog"] = {"type": "rest", "uri": "http://127.0.0.1:8181", "credential": SECRET + "-cat", "token": "tk-1234"}
    doc["spark"] = {"spark.hadoop.fs.s3a.secret.key": SECRET + "-s3", "spark.sql.shuffle.partitions": "8"}
    return doc


def test_reprs_show_no_secret() -> None:
    config = PipelineConfig.from_dict(_kafka_doc())
    text = repr(config)
    assert SECRET not in text and "tk-1234" not in text
    assert "'sasl.password': '***'" in text and "'credential': '***'" in text
    assert "'spark.hadoop.fs.s3a.secret.key': '***'" in text
    # What is not secret stays readable, and the config itself keeps the real values.
    assert "'sasl.username': 'alice'" in text and "'spark.sql.shuffle.partitions': '8'" in text
    assert config.catalog_options is not None and config.catalog_options["credential"] == SECRET + "-cat"
    kafka = KafkaSourceConfig.from_dict(config.source["kafka"])
    assert SECRET not in repr(kafka) and "'sasl.password': '***'" in repr(kafka)
    assert kafka.consumer["sasl.password"] == SECRET
    assert SECRET not in str(config)


def test_log_lines_and_traces_are_scrubbed() -> None:
    PipelineConfig.from_dict(_kafka_doc())  # loading remembers the secret values
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("icetide.test_secrets")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("connecting with %s", {"sasl.password": SECRET})
        try:
            raise RuntimeError(f"auth failed for password {SECRET}-ssl")
        except RuntimeError:
            logger.warning("broker said no", exc_info=True)
        logger.info("%d%% done, %d rows", 50, 5)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert SECRET not in text, text
    assert "connecting with {'sasl.password': '***'}" in text
    assert "RuntimeError: auth failed for password ***" in text and "Traceback" in text
    assert "50% done, 5 rows" in text
    assert redact({"a": {"token": "x"}, "b": 1}) == {"a": {"token": REDACTED}, "b": 1}
    assert scrub(f"uri=http://u:{SECRET}@h") == "uri=http://u:***@h"


def test_env_substitution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _kafka_doc()
    doc["source"]["kafka"]["consumer"]["sasl.password"] = "${ICETIDE_T_PASSWORD}"
    doc["source"]["kafka"]["bootstrap_servers"] = "${ICETIDE_T_BROKER:-127.0.0.1:9092}"
    doc["table"]["properties"] = {"comment": "costs $$5 ${ICETIDE_T_EMPTY}."}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("ICETIDE_T_PASSWORD", "from-env-pw-99")
    monkeypatch.setenv("ICETIDE_T_EMPTY", "")
    monkeypatch.delenv("ICETIDE_T_BROKER", raising=False)
    config = load_config(path)
    kafka = config.source["kafka"]
    assert kafka["consumer"]["sasl.password"] == "from-env-pw-99"
    assert kafka["bootstrap_servers"] == "127.0.0.1:9092"
    assert config.table.properties["comment"] == "costs $5 ."
    assert "from-env-pw-99" not in repr(config)
    assert scrub("password from-env-pw-99") == "password ***"

    monkeypatch.setenv("ICETIDE_T_BROKER", "broker:9093")
    assert load_config(path).source["kafka"]["bootstrap_servers"] == "broker:9093"

    monkeypatch.delenv("ICETIDE_T_PASSWORD")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "source.kafka.consumer.sasl.password" in message and "ICETIDE_T_PASSWORD is not set" in message
    assert expand_env({"l": ["${A}", "x"]}, environ={"A": "1"}) == {"l": ["1", "x"]}
    with pytest.raises(ConfigError, match=r"l\[0\]: environment variable B is not set"):
        expand_env({"l": ["${B}"]}, environ={})


@pytest.mark.parametrize("uri", ["s3a://bucket/wh", "s3://b/w", "gs://b/w", "abfss://c@a.dfs.core.windows.net/w"])
def test_hadoop_catalog_on_an_object_store_is_refused(uri: str) -> None:
    doc = copy.deepcopy(GOOD)
    doc["warehouse"] = uri
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict(doc)
    message = str(err.value)
    assert message.startswith("warehouse: a Hadoop catalog is not safe on ")
    assert "REST, JDBC, Glue or Hive" in message and "\n" not in message
    doc["catalog"] = {"type": "hadoop", "warehouse": uri}
    with pytest.raises(ConfigError, match=r"catalog\.warehouse: a Hadoop catalog is not safe"):
        PipelineConfig.from_dict(doc)
    with pytest.raises(ConfigError, match="Hadoop catalog is not safe"):
        catalog_conf("lake", warehouse=uri, options=None)
    # The catalogs that are safe there are accepted, and so is a local or HDFS warehouse.
    doc["catalog"] = {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": uri}
    assert PipelineConfig.from_dict(doc).catalog_options == doc["catalog"]
    assert catalog_conf("lake", warehouse="hdfs://nn/wh", options=None)["spark.sql.catalog.lake.type"] == "hadoop"
    assert catalog_conf("lake", warehouse=None, options={"type": "glue", "warehouse": uri})


def test_metrics_block_is_validated() -> None:
    doc = copy.deepcopy(GOOD)
    doc["metrics"] = {"prometheus_port": 9464}
    config = PipelineConfig.from_dict(doc)
    assert config.metrics is not None and config.metrics.prometheus_host == "127.0.0.1"
    doc["metrics"] = {"prometheus_port": "x"}
    with pytest.raises(ConfigError, match=r"metrics\.prometheus_port"):
        PipelineConfig.from_dict(doc)
    doc["metrics"] = {"prometheus_port": 1, "port": 2}
    with pytest.raises(ConfigError, match=r"metrics\.port: unknown key"):
        PipelineConfig.from_dict(doc)


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (
            f"jdbc:postgresql://127.0.0.1:5432/lake?user=icetide&password={SECRET}&ssl=true",
            "jdbc:postgresql://127.0.0.1:5432/lake?user=icetide&password=***&ssl=true",
        ),
        (f"jdbc:mysql://icetide:{SECRET}@db:3306/lake", "jdbc:mysql://icetide:***@db:3306/lake"),
        (f"https://catalog.example/api?token={SECRET}", "https://catalog.example/api?token=***"),
        ("http://127.0.0.1:8181", "http://127.0.0.1:8181"),
        ("jdbc:postgresql://db/lake?user=icetide&keyspace=x", "jdbc:postgresql://db/lake?user=icetide&keyspace=x"),
    ],
)
def test_credentials_inside_a_catalog_uri_are_redacted(uri: str, shown: str) -> None:
    """A JDBC or REST URI carrying a password or token shows as `***` there, in reprs and in the
    CLI's catalog line, and the value is scrubbed from any later text."""
    doc = copy.deepcopy(GOOD)
    doc["catalog"] = {"type": "jdbc", "uri": uri, "jdbc.user": "icetide", "jdbc.password": SECRET + "-pw"}
    config = PipelineConfig.from_dict(doc)
    assert redact(config.catalog_options or {})["uri"] == shown
    assert redact(config.catalog_options or {})["jdbc.password"] == REDACTED
    assert SECRET not in repr(config)
    assert config.catalog_options is not None and config.catalog_options["uri"] == uri  # the real value is kept
    if shown != uri:
        assert (
            scrub(f"java.sql.SQLException: cannot connect to {uri}")
            == f"java.sql.SQLException: cannot connect to {shown}"
        )
