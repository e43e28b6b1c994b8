"""Turnout: one accelerator, many models. An OpenAI-compatible multi-model server on Litestar and vLLM.

Layers, lowest first: ``profiles <- engine || frontend <- api <- cli``. ``profiles`` imports nothing of ours;
``engine`` and ``frontend`` import only ``profiles`` and never each other (the CLI hands the manager a bundle
builder); ``api`` imports the three below it; ``cli`` wires everything. ``tinymodels`` (the tiny test models)
stands apart. ``tests/test_layers.py`` holds these rules.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
