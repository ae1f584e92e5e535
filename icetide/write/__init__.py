"""Step 3 of a batch, on the driver: collapse, conform, distribute and plan the writes.

Also the key index and the deletion vectors of `deletes="vectors"`.
"""
