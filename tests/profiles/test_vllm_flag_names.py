"""vLLM's flag names read from its source (``source_flag_names``) against its live parsers."""

from __future__ import annotations

import pytest

from server.profiles import source_flag_names
from server.profiles.vllm_source import vllm_package_dir

needs_vllm = pytest.mark.skipif(vllm_package_dir() is None, reason="reads the installed vLLM's source")


@needs_vllm
def test_every_long_flag_of_vllms_engine_and_frontend_parsers_is_read_from_source() -> None:
    # turnout serve refuses a flag missing here before vLLM is imported: a missing one would refuse a good flag.
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from server.frontend.vllm_adapter import frontend_flag_names

    engine = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    live = {
        option
        for options in [*(action.option_strings for action in engine._actions), *frontend_flag_names().values()]
        for option in options
        if option.startswith("--") and option != "--help"
    }
    known = source_flag_names()
    assert known is not None
    negations = {option for option in live if option.startswith("--no-") and "--" + option[5:] in live}
    assert live - negations <= known
    assert "--max-model-len" in known and "--ssl-keyfile" in known and "--no-such-flag" not in known
