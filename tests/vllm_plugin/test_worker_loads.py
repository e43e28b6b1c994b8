"""How the worker runs a load: on the engine's cores, and with a garbage collector that skips a kept model.

Both change process-wide state (thread affinity, OpenMP threads, the collector's frozen heap), so each check runs
in a fresh interpreter. The swaps themselves are held by the real-engine tests in
tests/engine/test_in_place_engines.py.
"""

from __future__ import annotations

import json
import os

from tests.fresh_python import fresh_python

_BOUND_LOAD = """
import json, os, torch
from server.vllm_plugin.load_cores import on_engine_cores
narrow = {min(os.sched_getaffinity(0))} if %(narrow)s else os.sched_getaffinity(0)
os.sched_setaffinity(0, narrow)  # as vLLM's CPU worker binds itself to its share
torch.set_num_threads(1)
with on_engine_cores() as threads:
    during = (sorted(os.sched_getaffinity(0)), torch.get_num_threads(), threads)
after = (sorted(os.sched_getaffinity(0)), torch.get_num_threads())
print(json.dumps({"during": during, "after": after, "narrow": sorted(narrow)}))
"""


def test_a_load_in_a_bound_worker_runs_on_its_parents_cores_then_the_binding_comes_back() -> None:
    parent = sorted(os.sched_getaffinity(0))  # the fresh interpreter's parent is this process
    seen = json.loads(fresh_python(_BOUND_LOAD % {"narrow": True}))
    if len(parent) == 1:  # one core: nothing to widen, and nothing may change
        assert seen["during"] == [parent, 1, 1]
    else:
        assert seen["during"] == [parent, len(parent), len(parent)]
    assert seen["after"] == [seen["narrow"], 1]


def test_a_worker_as_wide_as_its_parent_loads_as_it_is() -> None:
    seen = json.loads(fresh_python(_BOUND_LOAD % {"narrow": False}))
    assert seen["during"] == [seen["narrow"], 1, 1]
    assert seen["after"] == [seen["narrow"], 1]


_KEPT_MODEL_GC = """
import json, weakref
from types import SimpleNamespace
from server.vllm_plugin.worker import ReconfigureWorkerExtension as Extension

class Model:  # a model holds reference cycles: only the collector frees it
    pass

model = Model()
model.self = model
alive = weakref.ref(model)
worker = SimpleNamespace(device=SimpleNamespace(type="cpu"))
Extension._turnout_collect_garbage(worker, model_kept=True)  # a weights swap: the model goes into the frozen heap
del model
Extension._turnout_collect_garbage(worker, model_kept=True)
skipped = alive() is not None  # the next weights swap's pass does not walk the kept model
Extension._turnout_collect_garbage(worker)  # a full unload
print(json.dumps({"skipped_while_kept": skipped, "freed_on_unload": alive() is None}))
"""


def test_a_kept_model_is_frozen_out_of_later_passes_and_freed_by_a_full_unload() -> None:
    seen = json.loads(fresh_python(_KEPT_MODEL_GC))
    assert seen == {"skipped_while_kept": True, "freed_on_unload": True}


_START_UP_HEAP = """
import gc, json, multiprocessing, os, weakref
from types import SimpleNamespace
from server.vllm_plugin import start_heap
from server.vllm_plugin.protocol import IN_PLACE_ENGINE_MARKER
from server.vllm_plugin.worker import ReconfigureWorkerExtension as Extension

class Garbage:
    pass

def cycle():
    garbage = Garbage()
    garbage.self = garbage
    return weakref.ref(garbage)

seen = {"plain process": start_heap.freeze_if_in_place_worker()}
multiprocessing.current_process().name = "VllmWorker-0"  # as vLLM names its worker processes
seen["worker of an engine that never swaps"] = start_heap.freeze_if_in_place_worker()
os.environ[IN_PLACE_ENGINE_MARKER] = "1"
start_up = cycle()  # garbage left by start-up: frozen with the rest
seen["worker of an in-place engine"] = start_heap.freeze_if_in_place_worker()
runner = cycle()  # built after the freeze: the first swap drops it
Extension._turnout_collect_garbage(SimpleNamespace(device=SimpleNamespace(type="cpu")), model_kept=True)
seen["first swap walked the start-up heap"] = start_up() is None
seen["first swap freed the runner"] = runner() is None
print(json.dumps(seen))
"""


def test_only_an_in_place_workers_start_up_heap_is_frozen_and_the_first_swap_skips_it() -> None:
    seen = json.loads(fresh_python(_START_UP_HEAP))
    assert seen == {
        "plain process": False,
        "worker of an engine that never swaps": False,
        "worker of an in-place engine": True,
        "first swap walked the start-up heap": False,
        "first swap freed the runner": True,
    }
