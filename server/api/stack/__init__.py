"""From a profile file to a running stack, one path for ``turnout serve``, a reload and a Ray node.

Public names: :class:`StackSource` (``source.py``: load, validate, assemble, the reloader and the app, from one
:class:`SourceOptions`), the options (``options.py``) and the assembly it calls (``assembly.py``: the settings, key
ring, bundle builder and manager of :class:`ServingStack`). The rest of ``server.api`` re-exports them.
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
from server.api.stack.source import StackSource

__all__ = [
    "ServingStack",
    "SourceOptions",
    "StackOptions",
    "StackSource",
    "assemble_stack",
    "bundle_builder",
    "edge_settings",
    "prepare_stack",
    "without_preloads",
]
