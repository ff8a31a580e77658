"""Rebuild kuberay-crd-schemas.json from KubeRay's CRDs (see README.md in this folder).

Usage: python tests/data/kuberay/vendor.py KUBERAY_CHECKOUT COMMIT
Keeps each CRD's ``v1`` openAPIV3Schema, drops the ``description`` texts, and stores each
subtree repeated across the three kinds (the pod template, mostly) once under ``$defs``.
Validation is unchanged: a ``$ref`` stands exactly for the subtree it replaced.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

KINDS = {"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices"}
MIN_CHARS = 4000  # only big repeated subtrees are worth a $ref


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _key(node: Any) -> str:
    return json.dumps(node, sort_keys=True)


def _count(node: Any, seen: Counter[str]) -> None:
    if isinstance(node, dict):
        text = _key(node)
        if len(text) >= MIN_CHARS:
            seen[text] += 1
        for v in node.values():
            _count(v, seen)
    elif isinstance(node, list):
        for v in node:
            _count(v, seen)


def _dedupe(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, dict):
        name = names.get(_key(node))
        if name is not None:
            return {"$ref": f"#/$defs/{name}"}
        return {k: _dedupe(v, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_dedupe(v, names) for v in node]
    return node


def main(checkout: str, commit: str) -> None:
    schemas = {}
    for kind, plural in KINDS.items():
        path = f"ray-operator/config/crd/bases/ray.io_{plural}.yaml"
        text = subprocess.run(["git", "-C", checkout, "show", f"{commit}:{path}"],
                              capture_output=True, text=True, check=True).stdout
        crd = yaml.safe_load(text)
        v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schemas[kind] = _strip(v1["schema"]["openAPIV3Schema"])
    kinds: dict[str, Any] = dict(schemas)
    defs: dict[str, Any] = {}
    while True:  # the largest repeated subtree first, until none is left
        seen: Counter[str] = Counter()
        for schema in (*kinds.values(), *defs.values()):
            _count(schema, seen)
        repeated = [t for t, n in seen.items() if n > 1]
        if not repeated:
            break
        text = max(repeated, key=len)
        name = "s" + hashlib.sha1(text.encode()).hexdigest()[:10]
        kinds = {k: _dedupe(s, {text: name}) for k, s in kinds.items()}
        defs = {k: {kk: _dedupe(vv, {text: name}) for kk, vv in d.items()}
                for k, d in defs.items()}
        defs[name] = {k: _dedupe(v, {text: name}) for k, v in json.loads(text).items()}
    out = {"source": f"github.com/ray-project/kuberay@{commit}",
           "kinds": kinds, "$defs": defs}
    target = Path(__file__).with_name("kuberay-crd-schemas.json")
    target.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {target} ({target.stat().st_size} bytes, {len(defs)} shared subtrees)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
