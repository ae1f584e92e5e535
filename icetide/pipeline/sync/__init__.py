"""A pipeline of many tables: a whole database's change streams, one Iceberg table per source table."""
