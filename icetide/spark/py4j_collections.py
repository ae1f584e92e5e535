"""Java collections through py4j without the cost of their end.

Iterating a Java collection as a Python iterable (`for x in jlist`, `dict(jmap)`, `set(jset)`)
ends with a java.util.NoSuchElementException that py4j turns into StopIteration; PySpark's
exception hook first converts that exception, about a dozen JVM round trips: 8-11 ms per loop
on this project's machines, against 0.4-0.6 ms for the loop itself (measured with a 9-element
ArrayList and a 2-entry HashMap; docs/design.md, "Java collections"). A streaming batch walks
several (schema columns, spec fields, identifier ids), so these helpers end by count instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def java_list(collection: Any) -> list[Any]:
    """A java.util.Collection's elements, in its order (one `toArray` call, then one per element)."""
    return list(collection.toArray())


def java_iter(iterable: Any) -> Iterator[Any]:
    """Iterate a java.lang.Iterable that is not a Collection (a CloseableIterable, say)."""
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()


def java_strings(spark: Any, values: list[str]) -> Any:
    """A java.util.List of `values` in three JVM calls however many there are (py4j would make
    one call an element): one string, split in the JVM. No value may hold a newline."""
    if any("\n" in v for v in values):
        raise ValueError("java_strings: a value holds a newline")
    j = spark.sparkContext._jvm
    return j.java.util.regex.Pattern.compile("\n").splitAsStream("\n".join(values)).toList()
