"""``python -m server.cli``: the ``turnout`` command without its console script."""

from server.cli.main import main

if __name__ == "__main__":  # vLLM spawns processes that re-import the entry module
    main()
