"""Code that runs in Spark's executors: the writers, the fast paths' tasks and their Kafka reads.

The decoders' tasks live with their format, in decode/<format>/tasks.py.
"""
