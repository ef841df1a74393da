"""The platform: what hardware exists and how it is wired (see docs/architecture.md).

Importing the package makes read-only mappings (``types.MappingProxyType``, which the presets, topologies and
every result use for their tables) picklable, so that topologies and results cross process boundaries (a
process pool, a Dask worker) and can be stored: a mapping is pickled as its plain dict and read back read-only.
"""

import copyreg
import types
from collections.abc import Callable
from typing import Any


def read_only(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    """A read-only view of ``mapping`` (what an unpickled ``MappingProxyType`` is rebuilt with)."""
    return types.MappingProxyType(mapping)


def _reduce_read_only(
    mapping: types.MappingProxyType[Any, Any],
) -> tuple[Callable[[dict[Any, Any]], types.MappingProxyType[Any, Any]], tuple[dict[Any, Any]]]:
    return read_only, (dict(mapping),)


copyreg.pickle(types.MappingProxyType, _reduce_read_only)
