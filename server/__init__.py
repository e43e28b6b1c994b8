"""Turnout: one accelerator, many models. An OpenAI-compatible multi-model server on Litestar and vLLM.

Layers, lowest first: ``profiles <- vllm_plugin <- engine || frontend <- api <- cluster <- cli``.

* ``profiles`` (what a profile says, and its validation) imports nothing of ours.
* ``vllm_plugin`` runs inside vLLM's own processes and imports only ``profiles``.
* ``engine`` (the manager that owns the engines and the device) imports ``profiles`` and the plugin's protocol;
  ``frontend`` (each model's OpenAI handlers over vLLM's serving classes) imports only ``profiles``. The two never
  import each other: the CLI hands the manager the frontend's bundle builder.
* ``api`` (the Litestar app) imports ``engine``, ``frontend`` and ``profiles``; ``cluster`` (Ray Serve replicas
  and their ingress) imports those and ``api``; ``cli`` wires everything.
* ``tinymodels`` (the tiny test models' builder) stands apart: it imports nothing of ours, and only the CLI
  imports it.

Another package enters ``engine``, ``frontend``, ``api`` and ``cluster`` through its face (its ``__init__``),
never an inner module. ``tests/test_layers.py`` holds these rules.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
