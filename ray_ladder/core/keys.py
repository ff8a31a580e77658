"""The API keys file of a shared serving endpoint: which team each key belongs to (hashes only).

The operator writes one entry per key: the team it belongs to and the key's SHA-256 (hex),
never the key. ``ray-ladder fleet hash-key --team TEAM`` reads a key on stdin and prints
its entry. Plain SHA-256, not a salted or slow hash: API keys are long random strings
(at least :data:`MIN_KEY_CHARS` characters), so a dictionary attack on their hashes is
hopeless, and a stored hash that needs no salt lets the endpoint check a key in
microseconds (GitHub, Stripe and LiteLLM store their tokens' SHA-256 the same way). A
salted or slow scheme protects short, human-chosen passwords, which keys are not.

No error about a keys file shows a value: a misplaced value may be a key.

Example:
    >>> keys = KeysFile.from_yaml(f'''
    ... keys:
    ...   - {{team: research, sha256: {hash_key("sk-research-0123456789abcdef")}, name: ci}}
    ... ''')
    >>> keys.teams, keys.keys[0].sha256[:12]
    (['research'], '711c1b032ac0')
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ray_ladder.core.config_errors import issues_from_validation_error
from ray_ladder.core.documents import parse_json, parse_yaml, read_text
from ray_ladder.core.exceptions import ConfigError, ConfigIssue
from ray_ladder.core.spec import SLUG_PATTERN

#: The shortest key ``hash-key`` accepts: shorter ones could be guessed from their hash.
MIN_KEY_CHARS = 20
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
#: Valid keys per level (the "did you mean" of an unknown field).
KEYS_KEYS = {"fleet": "keys, description", "keys": "team, sha256, name"}
_PLAINTEXT_FIELDS = {"key", "api_key", "apikey", "secret", "token", "password"}
_WHAT = "keys file"


def hash_key(key: str) -> str:
    """The SHA-256 (lowercase hex) of a key's UTF-8 text, surrounding whitespace removed
    (a key pasted with its newline is the same key).

    Example:
        >>> hash_key("sk-example-key-0123456789") == hash_key(" sk-example-key-0123456789\\n")
        True
    """
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()


def _rule(message: str, fix: str) -> PydanticCustomError:
    return PydanticCustomError("ladder_rule", message, {"path": "", "value": None, "fix": fix})


class KeyEntry(BaseModel):
    """One API key: its team and its SHA-256.

    Attributes:
        team: The fleet team whose quota and budget its requests get.
        sha256: The key's SHA-256, 64 hex characters (``ray-ladder fleet hash-key``).
        name: A label for the operator (who holds it); never used on a request.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    team: str = Field(pattern=SLUG_PATTERN, description="The fleet team of the key.")
    sha256: str = Field(description="SHA-256 of the key, 64 hex characters.")
    name: str | None = Field(None, max_length=200, description="A label for the operator.")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _HEX64.fullmatch(value):
            raise _rule("not a SHA-256 hex digest (64 hex characters; the value is not "
                        "shown: it may be a key)",
                        "put the output of `ray-ladder fleet hash-key` here, never the key")
        return value.lower()


class KeysFile(BaseModel):
    """The keys file: ``keys:``, a list of ``{team, sha256, name}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    description: str = Field("", description="Free text.")
    keys: list[KeyEntry] = Field(min_length=1, description="One entry per API key.")

    @model_validator(mode="after")
    def _unique(self) -> KeysFile:
        hashes: dict[str, int] = {}
        for i, entry in enumerate(self.keys):
            if entry.sha256 in hashes:
                raise PydanticCustomError("ladder_rule", "the same key as keys[{first}]",
                                          {"path": f"keys[{i}].sha256", "first": hashes[
                                              entry.sha256], "value": None,
                                           "fix": "list each key once, with its one team"})
            hashes[entry.sha256] = i
        return self

    @property
    def teams(self) -> list[str]:
        """The teams that have a key, sorted."""
        return sorted({entry.team for entry in self.keys})

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> KeysFile:
        """Validate a plain dict; :class:`ConfigError` names every problem, no value."""
        if not isinstance(data, dict):
            raise ConfigError([ConfigIssue("", "a keys file must be a mapping", None,
                                           "start the document with 'keys:'")], source, _WHAT)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise ConfigError(_issues(err, data), source, _WHAT) from None

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>") -> KeysFile:
        """Parse and validate YAML (JSON is YAML too); duplicate keys are errors."""
        return cls.from_dict(parse_yaml(text, source, _WHAT), source)


def _issues(err: ValidationError, data: Any) -> list[ConfigIssue]:
    """pydantic's errors as issues without their values; a plaintext key's field says so."""
    out = []
    for issue in issues_from_validation_error(err, data, KEYS_KEYS):
        field = issue.path.rsplit(".", 1)[-1]
        fix = issue.fix
        if "Extra inputs" in issue.message and field.lower() in _PLAINTEXT_FIELDS:
            fix = ("a keys file holds hashes, never keys: replace it with "
                   "'sha256: <the output of `ray-ladder fleet hash-key`>' and rotate the key")
        out.append(ConfigIssue(issue.path, issue.message, None, fix))
    return out


def load_keys(path: str | Path) -> KeysFile:
    """Read and validate a keys file (YAML, or JSON by its ``.json`` suffix).

    Raises:
        ConfigError: the file cannot be read, is not YAML/JSON, or an entry is invalid.
    """
    text = read_text(path, _WHAT)
    if Path(path).suffix.lower() == ".json":
        return KeysFile.from_dict(parse_json(text, str(path), _WHAT), str(path))
    return KeysFile.from_yaml(text, str(path))
