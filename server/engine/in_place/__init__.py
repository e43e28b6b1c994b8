"""The Turnout side of an in-place model swap: drive it through the engine core's utilities (``swap``), check
which model the engine core then reports, and refresh ``AsyncLLM``'s own model state (``frontend_state``).

The utilities themselves run inside vLLM's processes: ``server/vllm_plugin``.
"""
