"""Pipeline config: validated once, at load, every error naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig, load_config, parse_duration, parse_size
from icetide.errors import ConfigError

GOOD: dict[str, Any] = {
    "pipeline": "ads",
    "warehouse": "warehouse",
    "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "ads", "starting_offsets": "earliest"}},
    "format": "json",
    "table": {
        "name": "lake.ads.events",
        "schema": "ad_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, clicks INT",
        "key": ["ad_id", "event_time"],
        "partition_by": ["hours(event_time)"],
    },
    "mode": "upsert",
    "order_by": "event_time",
    "trigger": {"interval": "5s", "max_records": 100000},
    "dead_letter": "lake.ads.events_dead_letter",
}


def with_(path: str, value: Any) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


def test_the_issue_example_loads(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    config = load_config(path)
    assert config.pipeline == "ads" and config.source_kind == "kafka"
    assert config.trigger.interval == 5.0 and config.trigger.max_records == 100_000
    assert config.table.key == ("ad_id", "event_time") and config.distribution == "dynamic"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("pipeline", ..., "pipeline: required"),
        ("pipeline", "a b", "pipeline: 'a b'"),
        ("source", {"mq": {}}, "source: expected exactly one of"),
        ("format", "xml", "format: 'xml'"),
        ("mode", "merge", "mode: 'merge'"),
        ("table.key", ..., "table.key: required"),
        ("table.key", "ad_id", "table.key: expected a list"),
        ("table.name", "events", "table.name: 'events'"),
        ("table.colour", "red", "table.colour: unknown key"),
        ("trigger.interval", "soon", "trigger.interval: 'soon'"),
        ("trigger.max_records", 0, "trigger.max_records: must be at least 1"),
        ("trigger.overlap_commit", "yes", "trigger.overlap_commit: expected true or false"),
        ("distribution", "random", "distribution: 'random'"),
        ("max_bad_fraction", 2, "max_bad_fraction"),
        ("dead_letter", "dl", "dead_letter: 'dl'"),
        ("sourec", {}, "sourec: unknown key"),
    ],
)
def test_bad_config_names_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict(with_(path, value))
    assert message in str(err.value)


def test_load_names_the_file_and_yaml_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("pipeline: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read pipeline file"):
        load_config(tmp_path / "missing.yaml")


def test_source_settings_are_checked_by_the_source() -> None:
    from icetide.sources.kafka import KafkaSourceConfig

    with pytest.raises(ConfigError, match=r"source\.kafka\.topic"):
        KafkaSourceConfig.from_dict({"bootstrap_servers": "x"})


def test_durations_and_sizes() -> None:
    assert parse_duration("500ms", "k") == 0.5
    assert parse_duration("2m", "k") == 120
    assert parse_duration(3, "k") == 3
    assert parse_size("128MB", "k") == 128 * 1024 * 1024
    assert parse_size("64kb", "k") == 64 * 1024
    with pytest.raises(ConfigError, match="k: 'big'"):
        parse_size("big", "k")


@pytest.mark.parametrize("name", ["ads-kafka.yaml", "landing-files.yaml", "ads-stateful.yaml"])
def test_example_pipelines_load(name: str) -> None:
    config = load_config(Path(__file__).resolve().parent.parent / "examples" / name)
    assert config.dead_letter and config.table.key


def test_maintenance_block() -> None:
    assert PipelineConfig.from_dict({**GOOD, "maintenance": {"every_batches": 5}}).maintain_every_batches == 5
    with pytest.raises(ConfigError, match=r"maintenance\.every_batches"):
        PipelineConfig.from_dict({**GOOD, "maintenance": {"every_batches": 0}})


def test_maintenance_on_a_thread() -> None:
    config = PipelineConfig.from_dict(
        {**GOOD, "maintenance": {"every": "5m", "time_budget": "90s", "fold_deletes": "position"}}
    )
    m = config.maintenance
    assert m is not None and m.on_thread and m.every_seconds == 300 and m.time_budget_seconds == 90
    assert m.fold_deletes == "position" and config.maintain_every_batches is None
    assert (m.vector_deleted_share, m.vector_file_rows) == (0.1, 1_000_000)  # the deletion-vector policy's defaults
    # no block (or an empty one): on a thread every 10s at the default policy; `off` turns it off
    for absent in (GOOD, {**GOOD, "maintenance": {}}):
        default = PipelineConfig.from_dict(absent).maintenance
        assert default is not None and default.on_thread and default.every_seconds == 10
        assert default.time_budget_seconds is None and default.fold_deletes == "rewrite"
    budget_only = PipelineConfig.from_dict({**GOOD, "maintenance": {"time_budget": "2s"}}).maintenance
    assert budget_only is not None and budget_only.every_seconds == 10 and budget_only.time_budget_seconds == 2
    for off in ("off", False, "OFF"):
        assert PipelineConfig.from_dict({**GOOD, "maintenance": off}).maintenance is None
    tuned = PipelineConfig.from_dict(
        {**GOOD, "maintenance": {"every": "5m", "vector_deleted_share": 0.25, "vector_file_rows": "off"}}
    ).maintenance
    assert tuned is not None and (tuned.vector_deleted_share, tuned.vector_file_rows) == (0.25, None)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"every": "5m", "every_batches": 3}, r"maintenance\.every: give either every_batches .* not both"),
        ({"every": "0s"}, r"maintenance\.every: must be more than 0"),
        ({"every": "soon"}, r"maintenance\.every: 'soon' is not a duration"),
        (
            {"every": "1m", "fold_deletes": "merge"},
            r"maintenance\.fold_deletes: 'merge' is not one of rewrite, position",
        ),
        ({"every": "1m", "time_budget": "x"}, r"maintenance\.time_budget"),
        ({"every": "1m", "vector_deleted_share": 0}, r"maintenance\.vector_deleted_share: expected a share"),
        ({"every": "1m", "vector_deleted_share": "half"}, r"maintenance\.vector_deleted_share: expected a share"),
        ({"every": "1m", "vector_file_rows": 1.5}, r"maintenance\.vector_file_rows: expected a whole number"),
        ({"every": "1m", "mode": "thread"}, r"maintenance\.mode: unknown key"),
        ("often", r"maintenance: expected a mapping"),
    ],
)
def test_maintenance_errors_name_the_key(block: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PipelineConfig.from_dict({**GOOD, "maintenance": block})


def test_stateful_keys_load_and_fail_naming_the_key() -> None:
    doc = {**GOOD, "order_by": "event_time", "merge": {"engine": "partial"}, "state": {"ttl": "30d"}}
    settings = PipelineConfig.from_dict(doc).stateful
    assert settings is not None and settings.merge.engine == "partial" and settings.ttl_seconds == 30 * 86400
    assert settings.raw_table == GOOD["table"]["name"] + "_raw"
    assert PipelineConfig.from_dict(GOOD).stateful is None
    bad = [
        ({"merge": "newest"}, r"merge\.engine: 'newest'"),
        ({"merge": {"engine": "aggregate", "columns": {"clicks": "avg"}}}, r"merge\.columns\.clicks: 'avg'"),
        ({"merge": {"engine": "last", "columns": {"clicks": "sum"}}}, r"merge\.columns: per-column"),
        ({"merge": "last", "state": {"ttl": "soon"}}, r"state\.ttl: 'soon'"),
        ({"merge": "last", "state": {"window": "1h"}}, r"state\.window: unknown key"),
        ({"merge": "last", "state": {"dedup": "yes"}}, r"state\.dedup: expected auto, true or false"),
        ({"enrich": [{"table": "lake.d.c", True: ["id"], "columns": ["n"]}]}, r"enrich\[0\]\.on: YAML"),
        ({"enrich": [{"table": "lake.d.c", "join": ["id"]}]}, r"enrich\[0\]\.columns"),
        ({"raw": {"table": "lake.x.y"}}, r"raw: only used with merge or enrich"),
        ({"merge": "last", "mode": "append"}, r"mode: a stateful pipeline"),
    ]
    for extra, message in bad:
        with pytest.raises(ConfigError, match=message):
            PipelineConfig.from_dict({**GOOD, "order_by": "event_time", **extra})
    with pytest.raises(ConfigError, match="order_by: a stateful pipeline"):
        PipelineConfig.from_dict({**{k: v for k, v in GOOD.items() if k != "order_by"}, "merge": "last"})


def test_cdc_example_takes_its_table_from_the_stream() -> None:
    config = load_config(Path(__file__).resolve().parent.parent / "examples" / "mysql-cdc.yaml")
    assert config.format == "debezium" and config.table.schema is None and config.table.key == ()
    assert config.on_truncate == "apply" and config.schema_evolution
    assert config.debezium.decimal_handling_mode == "precise"


def test_json_keys_are_checked_at_load() -> None:
    """`json: {nested_as_text: true}` (an object or array in a STRING column as its JSON text)
    is off by default, a boolean, and read only with format: json."""
    assert PipelineConfig.from_dict(GOOD).json.nested_as_text is False
    assert PipelineConfig.from_dict({**GOOD, "json": {"nested_as_text": True}}).json.nested_as_text is True
    bad = [
        ({"json": {"nested_as_text": "yes"}}, r"json\.nested_as_text: expected true or false, not 'yes'"),
        ({"json": {"objects": True}}, r"json\.objects: unknown key \(allowed: nested_as_text\)"),
        ({"json": True}, r"json: expected a mapping with nested_as_text"),
        ({"json": {"nested_as_text": True}, "format": "debezium"}, r"json: only read with format: json, not debezium"),
    ]
    for extra, message in bad:
        with pytest.raises(ConfigError, match=message):
            PipelineConfig.from_dict({**GOOD, **extra})


def test_debezium_keys_are_checked_at_load() -> None:
    with pytest.raises(ConfigError, match=r"debezium\.decimal\.handling\.mode: 'exact'"):
        PipelineConfig.from_dict({**GOOD, "debezium": {"decimal.handling.mode": "exact"}})
    with pytest.raises(ConfigError, match=r"debezium\.nope: unknown key"):
        PipelineConfig.from_dict({**GOOD, "debezium": {"nope": 1}})
    with pytest.raises(ConfigError, match="on_truncate: 'ignore'"):
        PipelineConfig.from_dict({**GOOD, "on_truncate": "ignore"})
    with pytest.raises(ConfigError, match=r"table\.schema: required"):
        PipelineConfig.from_dict({**GOOD, "table": {"name": "lake.db.t", "key": ["id"]}})  # json needs a schema
