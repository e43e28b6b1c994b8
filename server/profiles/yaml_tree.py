"""Reading a profile file into ruamel's round-trip tree, and finding positions in that tree.

The round-trip loader keeps every node's line and column, which is what lets each error point at its cause.
JSON needs no separate path: ruamel parses it as YAML flow style, positions included.
"""

from __future__ import annotations

import codecs
import warnings
from pathlib import Path
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from server.profiles.check_context import Collector, Pos

__all__ = [
    "MAX_BYTES",
    "MAX_FLOW_DEPTH",
    "UNREADABLE",
    "item_pos",
    "key_pos",
    "load_tree",
    "node_pos",
    "pos_of_offset",
    "value_pos",
]

#: Returned by ``load_tree`` when there is no tree to check (the error is already reported).
UNREADABLE: Final = object()
#: Bracket nesting deeper than this is refused before parsing (see ``_flow_too_deep``).
MAX_FLOW_DEPTH: Final = 100
#: Far more than any profile needs; a bigger file is a mistake (a model file given by accident).
MAX_BYTES: Final = 4 * 2**20
_TOP: Final[Pos] = (1, 1)
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"


def load_tree(path: Path, shown: str, report: Collector, data: bytes | None = None) -> Any:
    """Read and parse a profile file.

    Args:
        path: The file to read.
        shown: The path as the user gave it (for messages).
        report: Where read and parse errors go.
        data: The file's content, already read by the caller (a reload reads it through one checked descriptor);
            ``path`` is then not opened.

    Returns:
        The round-trip tree (``None`` for an empty document), or ``UNREADABLE``.
    """
    if data is not None:
        if len(data) > MAX_BYTES:
            report.error(_TOP, f"the profile is larger than {MAX_BYTES // 2**20} MiB; that is not a profile")
            return UNREADABLE
        return _parse_bytes(data, report)
    try:
        if not path.exists():
            report.error(_TOP, f"profile file not found: there is no file at {path.absolute()}")
            return UNREADABLE
        if not path.is_file():  # a folder, a FIFO or a device (/dev/zero would never end)
            report.error(_TOP, f"cannot read the profile: {shown} is not a regular file")
            return UNREADABLE
        if path.stat().st_size > MAX_BYTES:
            report.error(_TOP, f"the profile is larger than {MAX_BYTES // 2**20} MiB; that is not a profile")
            return UNREADABLE
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # permissions, a name too long, a NUL byte in the name
        report.error(_TOP, f"cannot read the profile: {getattr(exc, 'strerror', None) or exc}")
        return UNREADABLE
    return _parse_bytes(data, report)


def _parse_bytes(data: bytes, report: Collector) -> Any:
    text = _decode(data, report)
    if text is None:
        return UNREADABLE
    return _parse(text, report)


def _decode(data: bytes, report: Collector) -> str | None:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            report.error(_TOP, "the profile starts with a UTF-16 byte order mark but is not valid UTF-16")
            return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        report.error(
            pos_of_offset(data, exc.start),
            f"the profile is not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded",
        )
        return None


def pos_of_offset(data: bytes | str, offset: int) -> Pos:
    """Turn an offset into ``data`` into a 1-based (line, column); columns count characters."""
    head = data[:offset]
    newline: Any = b"\n" if isinstance(head, bytes) else "\n"
    line = head.count(newline) + 1
    last = head[head.rfind(newline) + 1 :]
    width = len(last.decode("utf-8", "replace")) if isinstance(last, bytes) else len(last)
    return line, width + 1


def _new_yaml(*, allow_duplicates: bool = False) -> YAML:
    yaml = YAML(typ="rt")
    # Quoting is kept so that only *plain* scalars get YAML 1.1 booleans (see yaml_values.py).
    yaml.preserve_quotes = True
    yaml.allow_duplicate_keys = allow_duplicates
    return yaml


def _parse(text: str, report: Collector) -> Any:
    too_deep = _flow_too_deep(text)
    if too_deep is not None:
        report.error(pos_of_offset(text, too_deep), f"the profile nests more than {MAX_FLOW_DEPTH} brackets deep")
        return UNREADABLE
    try:
        return _load(text, allow_duplicates=False)
    except DuplicateKeyError as exc:
        if not _report_duplicates(text, report):
            _report_yaml_error(exc, text, report)
    except Exception as exc:  # ruamel is the boundary to arbitrary bytes: any failure is a parse error
        _report_yaml_error(exc, text, report)
        return UNREADABLE
    # Duplicates are reported; keep checking the rest of the file so that every error comes out at once.
    try:
        return _load(text, allow_duplicates=True)
    except Exception as exc:
        _report_yaml_error(exc, text, report)
        return UNREADABLE


def _flow_too_deep(text: str) -> int | None:
    """The offset where bracket nesting passes ``MAX_FLOW_DEPTH``, or ``None``.

    ruamel's scanner slows down quadratically with flow nesting (thousands of "[" take seconds) before its
    composer hits the recursion limit, so deep nesting is refused up front. Brackets inside strings count too:
    no real profile leaves a hundred of them open.
    """
    depth = 0
    for offset, char in enumerate(text):
        if char in "[{":
            depth += 1
            if depth > MAX_FLOW_DEPTH:
                return offset
        elif char in "]}":
            depth = max(depth - 1, 0)
    return None


def _load(text: str, *, allow_duplicates: bool) -> Any:
    with warnings.catch_warnings():
        # ruamel warns about style (for example floats without a dot); the profile's meaning is unaffected.
        warnings.simplefilter("ignore")
        return _new_yaml(allow_duplicates=allow_duplicates).load(text)


def _report_yaml_error(exc: Exception, text: str, report: Collector) -> None:
    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        pos = (mark.line + 1, mark.column + 1) if mark is not None else _TOP
        problem = exc.problem or exc.context or "malformed YAML"
        message = f"invalid YAML: {problem}"
        if exc.context and exc.problem:
            start = exc.context_mark
            if start is not None and mark is not None and (start.line, start.column) != (mark.line, mark.column):
                # Where the unclosed mapping or list began: usually where the fix goes.
                message += f" ({exc.context} that starts at line {start.line + 1}, column {start.column + 1})"
            else:
                message += f" ({exc.context})"
        if "'\\t'" in problem:
            message += "; indent with spaces, not tabs"
        report.error(pos, message)
    elif isinstance(exc, ReaderError):
        char = exc.character
        code = ord(char) if isinstance(char, str) else char
        shown = f"#x{code:02x}" if isinstance(code, int) else repr(code)
        report.error(pos_of_offset(text, exc.position), f"invalid YAML: the character {shown} is not allowed")
    elif isinstance(exc, RecursionError):
        report.error(_TOP, "invalid YAML: the profile nests too deeply to parse")
    else:
        report.error(_TOP, f"invalid YAML: {type(exc).__name__}: {exc}")


def _report_duplicates(text: str, report: Collector) -> bool:
    """Report every duplicate key in the file (ruamel stops at the first); return whether any was found."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = _new_yaml().compose(text)
    except Exception:
        return False
    found = False
    seen_nodes: set[int] = set()
    stack: list[Node] = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: the same node again
            continue
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack.append(value)
                if not isinstance(key, ScalarNode) or str(key.tag) == _MERGE_TAG:
                    continue
                ident = (str(key.tag), key.value)
                if ident in first:
                    mark = key.start_mark
                    report.error(
                        (mark.line + 1, mark.column + 1),
                        f"duplicate key {key.value!r} (first defined on line {first[ident]})",
                    )
                    found = True
                else:
                    first[ident] = key.start_mark.line + 1
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)
    return found


def node_pos(node: Any, default: Pos = _TOP) -> Pos:
    """Where a mapping or sequence starts; ``default`` for scalars, which carry no position."""
    try:
        return node.lc.line + 1, node.lc.col + 1
    except (AttributeError, TypeError):
        return default


def key_pos(mapping: Any, key: Any) -> Pos:
    """Where ``key`` is written in ``mapping`` (keys pulled in by a merge ``<<`` fall back to the mapping)."""
    try:
        line, col = mapping.lc.key(key)
        return line + 1, col + 1
    except (AttributeError, KeyError, TypeError):
        return node_pos(mapping)


def value_pos(mapping: Any, key: Any) -> Pos:
    """Where the value of ``key`` starts in ``mapping``."""
    try:
        line, col = mapping.lc.value(key)
        return line + 1, col + 1
    except (AttributeError, KeyError, TypeError):
        return key_pos(mapping, key)


def item_pos(sequence: Any, index: int) -> Pos:
    """Where item ``index`` of ``sequence`` starts."""
    try:
        line, col = sequence.lc.item(index)
        return line + 1, col + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return node_pos(sequence)
