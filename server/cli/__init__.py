"""The ``turnout`` command line: a click group with one module per subcommand."""

__all__: list[str] = []
