"""The llm-d router's endpoint picker, as far as it reads a pod's ``/metrics``: ported to Python for a contract test.

Ported from llm-d/llm-d-router (commit ebab687), ``pkg/epp/framework/plugins/datalayer``:

* ``source/metrics/datasource.go``: the page is parsed by Prometheus' ``expfmt.TextParser`` with legacy name
  validation into families keyed by name. Ported here: the legacy name rules, a family's samples (a histogram's
  or summary's ``_bucket``/``_sum``/``_count`` belong to it), and the parser's refusal of a family whose lines are
  not contiguous or that is declared twice, which fails the whole scrape.
* ``extractor/metrics/spec.go``: ``parseStringToSpec`` (``name{label=value,...}``) and ``getLatestMetric``: of
  the series matching the spec's labels, the one with the highest timestamp, a missing timestamp counting as 0,
  compared with ``>`` from -1, so that without timestamps the *first* series wins. ``extractValue``: a gauge's or
  counter's value, 0 for any other type. Queue and running sizes are truncated to ints (Go's ``int(float64)``).
* ``extractor/metrics/loraspec.go``: the LoRA info series is the matching one with the highest *value* (its
  creation timestamp), a missing family is no error; ``extractor.go``'s ``populateLoRAMetrics``: comma-separated
  adapter lists, trimmed, empties dropped; ``max_lora`` parsed as an int when not empty.
* ``extractor.go``'s ``getEngineTypeFromEndpoint`` and ``mapping_registry.go``: the engine type is the pod's
  ``llm-d.ai/engine-type`` label (then the legacy ``inference.networking.k8s.io/engine-type``), else ``default``,
  which is the ``defaultEngine`` (``vllm``), and an unknown type falls back to it too.
* ``scheduling/scorer/loraaffinity/lora_affinity.go``: the LoRA-affinity score of a pod for a model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EndpointMetrics", "EngineConfig", "Sample", "extract", "lora_affinity", "parse_families"]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([^=\s]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_SPEC = re.compile(r"^\s*(\S+?)\s*(?:\{([^}]*)\})?\s*$")
_SPEC_LABEL = re.compile(r'^\s*(\S+?)\s*=\s*"([^"]*)"\s*$')
_ADD_QUOTES = re.compile(r'(\w+)\s*=\s*([^",}\s]+)')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
ENGINE_LABEL = "llm-d.ai/engine-type"
LEGACY_ENGINE_LABEL = "inference.networking.k8s.io/engine-type"


@dataclass(frozen=True)
class Sample:
    """One series: its labels, value and timestamp in ms (None when the page gives none)."""

    labels: dict[str, str]
    value: float
    timestamp_ms: int | None


@dataclass
class Family:
    """A metric family as expfmt returns it."""

    name: str
    type: str = "untyped"
    samples: list[Sample] = field(default_factory=list)


def parse_families(text: str) -> dict[str, Family]:
    """Parse a text-format page as ``expfmt.TextParser.TextToMetricFamilies`` does; raises ValueError where it
    fails (which would fail the picker's whole scrape of the pod)."""
    families: dict[str, Family] = {}
    current: Family | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                current = _family_for(families, current, parts[2], number)
                if parts[1] == "TYPE":
                    if current.samples or current.type != "untyped":
                        raise ValueError(f"line {number}: second TYPE line or TYPE after samples for {parts[2]}")
                    current.type = parts[3].strip() if len(parts) > 3 else "untyped"
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"line {number}: not a sample: {line!r}")
        name, labels, value, timestamp = match.groups()
        family_name = _family_name(current, name)
        current = _family_for(families, current, family_name, number)
        current.samples.append(
            Sample(_labels(labels or "", number), _float(value), int(timestamp) if timestamp else None)
        )
    return families


def _family_name(current: Family | None, name: str) -> str:
    if current is not None and any(name == current.name + s for s in _SUFFIXES.get(current.type, ())):
        return current.name
    return name


def _family_for(families: dict[str, Family], current: Family | None, name: str, number: int) -> Family:
    if not re.fullmatch(_NAME, name):
        raise ValueError(f"line {number}: invalid metric name {name!r}")
    if current is not None and current.name == name:
        return current
    if name in families:
        raise ValueError(f"line {number}: family {name} appears again after another family")
    families[name] = Family(name)
    return families[name]


def _labels(text: str, number: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    for match in _LABEL.finditer(text):
        name, raw = match.groups()
        if not _LABEL_NAME.match(name) or name in labels:
            raise ValueError(f"line {number}: invalid or repeated label name {name!r}")
        labels[name] = raw.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return labels


def _float(text: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    return special[text] if text in special else float(text)


@dataclass(frozen=True)
class Spec:
    """A metric selector: a family name and the labels a series must carry."""

    name: str
    labels: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Spec | None:
        """``parseStringToSpec``: empty means disabled."""
        if not text:
            return None
        match = _SPEC.match(_ADD_QUOTES.sub(r'\1="\2"', text))
        if match is None or not re.fullmatch(_NAME, match[1]):
            raise ValueError(f"not a valid metric specification: {text!r}")
        labels: dict[str, str] = {}
        for pair in (match[2] or "").strip().split(",") if (match[2] or "").strip() else []:
            label = _SPEC_LABEL.match(pair)
            if label is None or not _LABEL_NAME.match(label[1]):
                raise ValueError(f"invalid label pair {pair!r} in specification: {text!r}")
            labels[label[1]] = label[2]
        return cls(match[1], labels)

    def matches(self, sample: Sample) -> bool:
        return all(sample.labels.get(name) == value for name, value in self.labels.items())


@dataclass(frozen=True)
class EngineConfig:
    """One of the core-metrics-extractor's ``engineConfigs`` (the fields this contract uses)."""

    name: str
    queued: Spec | None
    running: Spec | None
    kv_usage: Spec | None
    lora: Spec | None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> EngineConfig:
        """From the plugin's JSON parameters (``queuedRequestsSpec``, ...)."""
        return cls(
            name=params["name"],
            queued=Spec.parse(params.get("queuedRequestsSpec", "")),
            running=Spec.parse(params.get("runningRequestsSpec", "")),
            kv_usage=Spec.parse(params.get("kvUsageSpec", "")),
            lora=Spec.parse(params.get("loraSpec", "")),
        )


#: The built-in configuration the picker falls back to for an unlabelled pod (``defaultEngineConfigs``).
VLLM = EngineConfig.from_params(
    {
        "name": "vllm",
        "queuedRequestsSpec": "vllm:num_requests_waiting",
        "runningRequestsSpec": "vllm:num_requests_running",
        "kvUsageSpec": "vllm:kv_cache_usage_perc",
        "loraSpec": "vllm:lora_requests_info",
    }
)


@dataclass
class EndpointMetrics:
    """The endpoint attributes the extractor writes (``fwkdl.Metrics``), and the errors it reports."""

    WaitingQueueSize: int = 0
    RunningRequestsSize: int = 0
    KVCacheUsagePercent: float = 0.0
    ActiveModels: dict[str, int] = field(default_factory=dict)
    WaitingModels: dict[str, int] = field(default_factory=dict)
    MaxActiveModels: int = 0
    errors: list[str] = field(default_factory=list)


def engine_type(pod_labels: dict[str, str]) -> str:
    """``getEngineTypeFromEndpoint``."""
    return pod_labels.get(ENGINE_LABEL) or pod_labels.get(LEGACY_ENGINE_LABEL) or "default"


def extract(text: str, pod_labels: dict[str, str], configs: list[EngineConfig]) -> EndpointMetrics:
    """One scrape of one pod as the core-metrics-extractor turns it into endpoint attributes."""
    registry = {config.name: config for config in [*configs, VLLM] if config is not None}
    registry.setdefault("default", VLLM)
    mapping = registry.get(engine_type(pod_labels), registry["default"])
    families = parse_families(text)
    out = EndpointMetrics()
    for spec, attribute in ((mapping.queued, "WaitingQueueSize"), (mapping.running, "RunningRequestsSize")):
        if spec is not None and (sample := _latest(spec, families, out.errors)) is not None:
            setattr(out, attribute, int(_value(families[spec.name], sample)))
    if mapping.kv_usage is not None and (sample := _latest(mapping.kv_usage, families, out.errors)) is not None:
        out.KVCacheUsagePercent = _value(families[mapping.kv_usage.name], sample)
    if mapping.lora is not None and (sample := _latest_lora(mapping.lora, families)) is not None:
        _populate_lora(out, sample)
    return out


def _latest(spec: Spec, families: dict[str, Family], errors: list[str]) -> Sample | None:
    family = families.get(spec.name)
    if family is None or not family.samples:
        errors.append(f"metric family {spec.name!r} not found or empty")
        return None
    latest, recent = None, -1
    for sample in family.samples:
        timestamp = sample.timestamp_ms or 0
        if spec.matches(sample) and timestamp > recent:
            latest, recent = sample, timestamp
    if latest is None:
        errors.append(f"no matching metric found for {spec.name!r} with labels {spec.labels}")
    return latest


def _latest_lora(spec: Spec, families: dict[str, Family]) -> Sample | None:
    family = families.get(spec.name)
    if family is None:
        return None
    latest, recent = None, -1.0
    for sample in family.samples:
        value = _value(family, sample)
        if spec.matches(sample) and value > recent:
            latest, recent = sample, value
    return latest


def _value(family: Family, sample: Sample) -> float:
    return sample.value if family.type in ("gauge", "counter") else 0.0


def _populate_lora(out: EndpointMetrics, sample: Sample) -> None:
    out.ActiveModels, out.WaitingModels = {}, {}
    for name, value in sample.labels.items():
        if name == "running_lora_adapters":
            out.ActiveModels.update((a.strip(), 0) for a in value.split(",") if a.strip())
        elif name == "waiting_lora_adapters":
            out.WaitingModels.update((a.strip(), 0) for a in value.split(",") if a.strip())
        elif name == "max_lora" and value:
            try:
                out.MaxActiveModels = int(value)
            except ValueError as error:
                out.errors.append(str(error))


def lora_affinity(metrics: EndpointMetrics, model: str) -> float:
    """``LoraAffinityScorer.Score`` for one pod and the requested model."""
    if model in metrics.ActiveModels:
        return 1.0
    if len(metrics.ActiveModels) + len(metrics.WaitingModels) < metrics.MaxActiveModels:
        return 0.8
    if model in metrics.WaitingModels:
        return 0.6
    return 0.0
