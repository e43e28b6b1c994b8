"""Turnout's benchmarks: run them all with ``just bench`` (``python -m benchmarks.run_all``).

Not collected by pytest (``testpaths = ["tests"]``): performance goals are ratios measured side by side in one run,
never timed tests.
"""
