"""The micro-batch runner: source -> decode -> dead-letter + upsert sink, exactly once."""
