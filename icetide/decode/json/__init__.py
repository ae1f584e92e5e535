"""Plain JSON records into a table's columns, exactly or as dead letters."""
