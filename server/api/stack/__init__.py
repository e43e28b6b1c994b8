"""From a profile file to a running stack, one path for ``turnout serve``, a reload and a Ray node.

Public names: :class:`StackSource` (``source.py``: load, validate, assemble, the reloader and the app, from one
:class:`SourceOptions`), the options (``options.py``), the assembly it calls (``assembly.py``: the settings, key
ring, bundle builder and manager of :class:`ServingStack`) and the one assembly of the app's settings
(``serving_settings.py``: :func:`api_settings` from :class:`ServingFlags`). It sits at the top of ``server.api``,
and ``server.api`` re-exports its names.
"""

from server.api.stack.assembly import (
    ServingStack,
    assemble_stack,
    bundle_builder,
    edge_settings,
    prepare_stack,
    without_preloads,
)
from server.api.stack.options import SourceOptions, StackOptions
from server.api.stack.serving_settings import ServingFlags, api_settings
from server.api.stack.source import StackSource

__all__ = [
    "ServingFlags",
    "ServingStack",
    "SourceOptions",
    "StackOptions",
    "StackSource",
    "api_settings",
    "assemble_stack",
    "bundle_builder",
    "edge_settings",
    "prepare_stack",
    "without_preloads",
]
