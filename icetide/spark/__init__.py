"""Spark session building: jar discovery, catalog configuration, Java checks."""
