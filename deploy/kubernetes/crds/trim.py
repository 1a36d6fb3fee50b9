#!/usr/bin/env python3
"""Makes the small CRD schemas that validate.py checks custom resources against.

    python3 trim.py PUBLISHED_CRD.yaml VERSION OUT.schema.json [PATH_TO_PRESERVE ...]

Takes the openAPIV3Schema of one version of a CRD as its project publishes it, drops the
descriptions, and replaces the subtrees named by PATH_TO_PRESERVE (dotted property names; `{}`
for a map's values, `[]` for a list's items) by "any object": those are the embedded Kubernetes
pod and job templates, which validate.py checks with the full Kubernetes schema instead. The
result is written with the CRD's source recorded beside it (see README.md in this folder).
"""
import json
import sys

import yaml

ANY_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def preserve(schema, path):
    """Replaces the subtree at `path` (e.g. `spec.pytorchReplicaSpecs{}.template`)."""
    node = schema
    parts = path.replace("{}", ".{}").replace("[]", ".[]").split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "{}":
            key, holder = "additionalProperties", node
        elif part == "[]":
            key, holder = "items", node
        else:
            key, holder = part, node["properties"]
        if key not in holder:
            sys.exit(f"trim.py: {path}: no {part!r} in the schema; check the path against the CRD")
        if last:
            holder[key] = dict(ANY_OBJECT)
        else:
            node = holder[key]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    crd_file, version, out, *paths = sys.argv[1:]
    with open(crd_file) as f:
        crd = yaml.safe_load(f)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions:
        sys.exit(f"trim.py: {crd_file} has versions {sorted(versions)}, not {version}")
    schema = strip_descriptions(versions[version]["schema"]["openAPIV3Schema"])
    for path in paths:
        preserve(schema, path)
    doc = {
        "group": crd["spec"]["group"],
        "kind": crd["spec"]["names"]["kind"],
        "version": version,
        "preserved": paths,
        "openAPIV3Schema": schema,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
