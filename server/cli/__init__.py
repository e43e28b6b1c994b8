"""The ``turnout`` command line: a click group with one module per subcommand.

The top layer (see ``server/__init__.py``): it wires the engine manager, the frontend's bundle builder and the app
(``turnout serve``), or the Ray application (``turnout ray-serve``), entering each package through its face.
"""

__all__: list[str] = []
