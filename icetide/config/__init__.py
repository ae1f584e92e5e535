"""Pipeline files: the typed config, validated at load, and the secrets it redacts.

`load_config` and `PipelineConfig` are also exported by `icetide` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icetide.config.pipeline import PipelineConfig, load_config

__all__ = ["PipelineConfig", "load_config"]


def __getattr__(name: str) -> Any:
    # `from icetide.config import load_config` as before the folder move, without importing the
    # pipeline module (and what it imports) for every `icetide.config.*` module.
    if name in __all__:
        from icetide.config import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'icetide.config' has no attribute {name!r}")
