"""Reading a ladder or fleet file: UTF-8 text, YAML or JSON, no duplicate keys.

Every failure is a :class:`ConfigError` naming the file, where, and the fix, never a
traceback: a byte that is not UTF-8 (with its offset), a syntax error (with its line), a
key given twice in one mapping (with both lines: YAML and JSON would keep the last one
silently).

Example:
    >>> parse_text("name: a\\nname: b\\n", "x.yaml")  # doctest: +SKIP
    ConfigError: invalid ladder in x.yaml:
      - line 2, column 1: duplicate key 'name' (also on line 1). Fix: ...
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ray_ladder.core.exceptions import ConfigError, ConfigIssue

SUFFIXES = (".yaml", ".yml", ".json")
"""File names ``ray-ladder validate DIR`` reads."""


class _DuplicateKey(Exception):
    def __init__(self, issue: ConfigIssue) -> None:
        self.issue = issue


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that a mapping already has."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so below
                continue
            if first is not None:
                raise _DuplicateKey(ConfigIssue(
                    f"line {line}, column {key_node.start_mark.column + 1}",
                    f"duplicate key {key!r} (also on line {first})", None,
                    "keep one of them: YAML would silently use the last"))
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_text(path: str | Path, what: str = "ladder") -> str:
    """The file's text; :class:`ConfigError` when it cannot be read or is not UTF-8."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise ConfigError([ConfigIssue("", f"cannot read file: {err.strerror}", str(p),
                                       "check the path")], str(p), what) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError([ConfigIssue(
            f"line {line}, byte {err.start}",
            f"not UTF-8 text: byte {raw[err.start:err.start + 1]!r} cannot be decoded", None,
            "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 FILE`)")],
            str(p), what) from None


def parse_yaml(text: str, source: str = "<string>", what: str = "ladder") -> Any:
    """Parse YAML (JSON is YAML too), refusing duplicate keys."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as dup:
        raise ConfigError([dup.issue], source, what) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        raise ConfigError(
            [ConfigIssue(where, f"not valid YAML: {getattr(err, 'problem', err)}",
                         None, "fix the YAML syntax (indentation, quotes, colons)")],
            source, what,
        ) from None


def parse_json(text: str, source: str = "<string>", what: str = "ladder") -> Any:
    """Parse JSON, refusing duplicate keys."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                lines = [text.count("\n", 0, m.start()) + 1
                         for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
                where = f"line {lines[1]}" if len(lines) > 1 else "document"
                raise _DuplicateKey(ConfigIssue(
                    where, f"duplicate key {key!r}" + (f" (also on line {lines[0]})"
                                                       if len(lines) > 1 else ""),
                    None, "keep one of them: JSON readers would silently use the last"))
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except _DuplicateKey as dup:
        raise ConfigError([dup.issue], source, what) from None
    except json.JSONDecodeError as err:
        raise ConfigError(
            [ConfigIssue(f"line {err.lineno}, column {err.colno}",
                         f"not valid JSON: {err.msg}", None, "fix the JSON syntax")],
            source, what,
        ) from None


def load_document(path: str | Path, what: str = "ladder") -> Any:
    """Read and parse a file (JSON by its ``.json`` suffix, else YAML); not validated."""
    p = Path(path)
    text = read_text(p, what)
    if p.suffix.lower() == ".json":
        return parse_json(text, str(p), what)
    return parse_yaml(text, str(p), what)


def json_schema(model: type[BaseModel], schema_id: str | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a file model, for editors and CI linters.

    Descriptions keep the first paragraph of each model's docstring (no examples).

    Example:
        >>> from ray_ladder.core.spec import Ladder
        >>> json_schema(Ladder)["properties"]["rungs"]["minItems"]
        1
    """
    schema = model.model_json_schema()

    def trim(node: Any) -> None:
        if isinstance(node, dict):
            text = node.get("description")
            if isinstance(text, str) and "properties" in node:
                node["description"] = text.split("\n\n")[0].replace("\n", " ").strip()
            for value in node.values():
                trim(value)
        elif isinstance(node, list):
            for value in node:
                trim(value)

    trim(schema)
    head: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if schema_id:
        head["$id"] = schema_id
    return {**head, **schema}
