"""Pipeline files: the typed config, validated at load, and the secrets it redacts."""
