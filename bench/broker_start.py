"""How long the tests' Apache Kafka broker (tests/kafka_broker.py) takes to start, restart and stop.

    .venv/bin/python bench/broker_start.py [--rounds 3] [--options test|bench] [--record]

Each round makes a new broker in a temporary folder and measures: `kafka-storage format` (its own
JVM), the first start until the broker serves metadata, a clean restart (SIGTERM, then start on
the same ports and log) and a crash restart (SIGKILL, then start: log recovery) with a 2-partition
topic of 1,000 records, each until every partition is led again, and the final clean stop. The JVM
options are the tests' (`test`: C1 only, serial GC, 512 MB heap) or the benchmarks' (`bench`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, parser, render_table, report


def main() -> None:
    from tests.kafka_broker import BENCH_JVM_OPTIONS, TEST_JVM_OPTIONS, KafkaBroker, create_topic, produce
    from tests.kafka_jars import KAFKA_VERSION, fetch_broker_jars

    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--options", choices=["test", "bench"], default="test")
    args = p.parse_args()
    options = TEST_JVM_OPTIONS if args.options == "test" else BENCH_JVM_OPTIONS
    fetch_broker_jars()
    results: dict[str, list[float]] = {k: [] for k in ("format", "start", "restart", "crash restart", "stop")}
    loads = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as work:
            broker = KafkaBroker(Path(work), jvm_options=options)
            try:
                broker.start()
                topic = create_topic(broker.bootstrap, 2)
                produce(broker.bootstrap, topic, [(i % 2, None, b"x" * 100, None) for i in range(1000)])
                began = time.monotonic()
                broker.restart()
                results["restart"].append(time.monotonic() - began)
                began = time.monotonic()
                broker.restart(crash=True)
                results["crash restart"].append(time.monotonic() - began)
                began = time.monotonic()
                broker.stop()
                results["stop"].append(time.monotonic() - began)
            finally:
                broker.kill()
            results["format"].append(broker.format_seconds)
            results["start"].append(broker.start_seconds[0])
            loads.append(os.getloadavg()[0])
    table = render_table(
        ["step", "median s", "min s", "max s"],
        [(k, f"{median(v):.1f}", f"{min(v):.1f}", f"{max(v):.1f}") for k, v in results.items()],
    )
    body = (
        f"Apache Kafka {KAFKA_VERSION} (one KRaft node), JVM options `{' '.join(options)}`, {args.rounds} rounds; "
        f"restarts include the stop (SIGTERM or SIGKILL) and last until every partition is led again. "
        f"Shared 2-core machine, other work running beside it (1-minute load average "
        f"{min(loads):.1f}-{max(loads):.1f} at the rounds' ends).\n\n{table}\n"
    )
    report("bench/broker_start.py: the test broker's start, restart and stop", body, save=args.record)


if __name__ == "__main__":
    main()
