#!/usr/bin/env python3
"""Validates every Kubernetes manifest under deploy/kubernetes, offline (no cluster).

    pip install kubernetes-validate==1.37.0 && python3 deploy/kubernetes/validate.py

1. Renders the base and each overlay (kustomize-style). With `kubectl` (which carries kustomize)
   or `kustomize` installed, both that and this file's own renderer render each one and must
   agree; without either, this file's renderer alone (it reads the subset of kustomize these
   manifests use: resources, components, namespace, images and strategic-merge patches,
   and refuses anything else rather than ignore it).
2. Checks every object, rendered and in examples/, strictly (an unknown field is an error):
   built-in kinds against the Kubernetes schemas in `kubernetes-validate`, for the oldest
   Kubernetes these manifests support and the newest the package knows; custom resources
   (ServiceMonitor, PyTorchJob, JobSet) against their published CRD schemas (crds/README.md),
   and the pod and job templates inside them against the Kubernetes schemas.
3. Checks what schemas cannot: Services select pods and name ports they have, probes name
   ports the container has, claims and headless Services exist, `$(VAR)` in an env value comes
   after VAR (Kubernetes expands only earlier ones), every CORONER_* variable is one coroner
   reads, and every Secret referenced is one docs/KUBERNETES.md tells how to create.

Before all that it feeds itself broken objects and fails unless each is refused, so a
validator that passes everything cannot pass CI. Exit status 0 when everything holds.
"""
import copy
import json
import pathlib
import re
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
# Native gRPC probes and Service appProtocol kubernetes.io/h2c: Kubernetes 1.27 and later.
OLDEST_KUBERNETES = "1.27.0"
KUSTOMIZATIONS = ["base", "overlays/sqlite", "overlays/postgres"]
EXAMPLES = sorted((HERE / "examples").glob("*.yaml"))
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass", "CustomResourceDefinition"}
# Strategic merge: the lists that merge item by item, and their keys (Kubernetes' patchMergeKey).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}
BUILTIN_GROUPS = {"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1"}


class Failure(Exception):
    pass


# ---------------------------------------------------------------- rendering


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def key_of(obj):
    meta = obj.get("metadata", {})
    return (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))


def build(directory, expect="Kustomization"):
    """Renders one kustomization (or component) folder into a list of objects."""
    directory = pathlib.Path(directory)
    k = load_yaml_docs(directory / "kustomization.yaml")[0]
    if k.get("kind", "Kustomization") != expect:
        raise Failure(f"{directory}/kustomization.yaml is a {k.get('kind')}, expected a {expect}")
    unknown = set(k) - {"apiVersion", "kind", "resources", "components", "namespace", "images", "patches"}
    if unknown:
        raise Failure(f"{directory}/kustomization.yaml: this renderer does not read {sorted(unknown)}; extend validate.py or do without")
    objs = []
    for res in k.get("resources", []):
        path = directory / res
        objs += build(path) if path.is_dir() else load_yaml_docs(path)
    for comp in k.get("components", []):
        apply_component(objs, directory / comp)
    for patch in k.get("patches", []):
        apply_patch(objs, patch, directory)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = k["namespace"]
    for image in k.get("images", []):
        set_image(objs, image)
    return objs


def apply_component(objs, directory):
    k = load_yaml_docs(directory / "kustomization.yaml")[0]
    if k.get("kind") != "Component":
        raise Failure(f"{directory}: a component's kustomization.yaml must be kind Component")
    unknown = set(k) - {"apiVersion", "kind", "resources", "patches"}
    if unknown:
        raise Failure(f"{directory}/kustomization.yaml: this renderer does not read {sorted(unknown)} in a component")
    for res in k.get("resources", []):
        objs += load_yaml_docs(directory / res)
    for patch in k.get("patches", []):
        apply_patch(objs, patch, directory)


def apply_patch(objs, entry, directory):
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown:
        raise Failure(f"{directory}: a patch with {sorted(unknown)}: not read by this renderer")
    text = (directory / entry["path"]).read_text() if "path" in entry else entry["patch"]
    body = yaml.safe_load(text)
    target = entry.get("target")
    if not isinstance(body, dict):
        raise Failure(f"{directory}: only strategic-merge patches are read by this renderer (a JSON patch is a list)")
    target = target or {"kind": body["kind"], "name": body["metadata"]["name"]}
    for o in select(objs, target, directory):
        builtin = o["apiVersion"] in BUILTIN_GROUPS
        merged = strategic_merge(o, body, builtin)
        o.clear()
        o.update(merged)


def select(objs, target, directory):
    unknown = set(target) - {"kind", "name"}
    if unknown:
        raise Failure(f"{directory}: patch targets by {sorted(unknown)} are not read by this renderer")
    found = [o for o in objs if target.get("kind", o["kind"]) == o["kind"] and target.get("name", o["metadata"]["name"]) == o["metadata"]["name"]]
    if not found:
        raise Failure(f"{directory}: a patch's target {target} matches nothing")
    return found


def strategic_merge(orig, patch, builtin):
    """Kubernetes strategic merge, as kustomize applies it: maps merge, `null` deletes, the lists
    in MERGE_KEYS merge item by item (the patch's items first, in its order, then the rest:
    kustomize's order), other lists (and every list of a custom resource) are replaced."""
    if not isinstance(orig, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(orig)
    for k, v in patch.items():
        if isinstance(k, str) and k.startswith("$"):
            raise Failure(f"patch directive {k} is not read by this renderer")
        if v is None:
            out.pop(k, None)
        elif builtin and k in MERGE_KEYS and isinstance(v, list) and isinstance(out.get(k), list):
            mk = MERGE_KEYS[k]
            old = {item[mk]: item for item in out[k]}
            merged = [strategic_merge(old[item[mk]], item, builtin) if item[mk] in old else copy.deepcopy(item) for item in v]
            touched = {item[mk] for item in v}
            out[k] = merged + [item for item in out[k] if item[mk] not in touched]
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = strategic_merge(out[k], v, builtin)
        else:
            out[k] = copy.deepcopy(v)
    return out


def set_image(objs, entry):
    for container in all_containers(objs):
        name, _, tag = container["image"].partition(":")
        if name == entry["name"]:
            container["image"] = f"{entry.get('newName', name)}:{entry.get('newTag', tag)}" if entry.get("newTag", tag) else entry.get("newName", name)


def kustomize_binary():
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render_with_binary(cmd, directory):
    out = subprocess.run(cmd + [str(directory)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise Failure(f"{' '.join(cmd)} {directory}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def same_render(ours, theirs, where):
    a = {key_of(o): o for o in ours}
    b = {key_of(o): o for o in theirs}
    if a.keys() != b.keys():
        raise Failure(f"{where}: kustomize renders {sorted(map(str, b))}, this renderer {sorted(map(str, a))}")
    for k in a:
        if a[k] != b[k]:
            raise Failure(f"{where}: {k} differs between kustomize and this renderer:\n kustomize: {json.dumps(b[k], sort_keys=True)}\n ours:      {json.dumps(a[k], sort_keys=True)}")


# ---------------------------------------------------------------- schemas


def load_crd_schemas():
    schemas = {}
    for path in sorted((HERE / "crds").glob("*.schema.json")):
        doc = json.loads(path.read_text())
        schemas[(f"{doc['group']}/{doc['version']}", doc["kind"])] = strict(doc["openAPIV3Schema"])
    return schemas


def strict(schema):
    """The schema with every object that lists its properties closed to others (as the API
    server's strict field validation is), except where the CRD preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    # Kubernetes' int-or-string: JSON Schema does not know the keyword.
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def kube_versions():
    latest = kubernetes_validate.latest_version()
    return [OLDEST_KUBERNETES, latest]


def validate_builtin(obj, where):
    for version in kube_versions():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            raise Failure(f"{where}: {obj['kind']} {obj['metadata'].get('name')}: Kubernetes {version}: {path}: {e.message}") from None
        except kubernetes_validate.SchemaNotFoundError:
            raise Failure(f"{where}: {obj['apiVersion']} {obj['kind']} is not a Kubernetes {version} kind, and validate.py has no CRD schema for it") from None


def validate_custom(obj, schema, where):
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise Failure(f"{where}: {obj['kind']} {obj['metadata'].get('name')}: {'/'.join(map(str, e.path))}: {e.message}")
    for name, template in embedded_templates(obj):
        validate_builtin(template, f"{where} ({obj['kind']} {name})")


def embedded_templates(obj):
    """The Kubernetes objects inside a custom resource, as objects the Kubernetes schemas check."""
    name = obj["metadata"]["name"]
    if obj["kind"] == "PyTorchJob":
        for rtype, spec in obj["spec"]["pytorchReplicaSpecs"].items():
            yield rtype, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{name}-{rtype.lower()}"}, "template": spec["template"]}
    elif obj["kind"] == "JobSet":
        for rjob in obj["spec"]["replicatedJobs"]:
            t = rjob["template"]
            yield rjob["name"], {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-{rjob['name']}", **t.get("metadata", {})}, "spec": t["spec"]}


def validate_object(obj, crds, where):
    schema = crds.get((obj.get("apiVersion"), obj.get("kind")))
    if schema is not None:
        validate_custom(obj, schema, where)
    else:
        validate_builtin(obj, where)


# ---------------------------------------------------------------- consistency


def pod_specs(objs):
    """(object, pod spec, pod labels) for every pod template among the objects."""
    for o in objs:
        kind = o["kind"]
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            t = o["spec"]["template"]
            yield o, t["spec"], t.get("metadata", {}).get("labels", {})
        elif kind == "PyTorchJob":
            for spec in o["spec"]["pytorchReplicaSpecs"].values():
                yield o, spec["template"]["spec"], spec["template"].get("metadata", {}).get("labels", {})
        elif kind == "JobSet":
            for rjob in o["spec"]["replicatedJobs"]:
                t = rjob["template"]["spec"]["template"]
                yield o, t["spec"], t.get("metadata", {}).get("labels", {})


def all_containers(objs):
    for _, spec, _ in pod_specs(objs):
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def coroner_variables():
    """The CORONER_* variables coronerd, the agent and the CLI read (clap's `env = "..."`)."""
    names = set()
    for src in ["services/coronerd/src/config.rs", "services/coroner-agent/src/main.rs", "services/coroner/src/main.rs"]:
        names |= set(re.findall(r'env = "(CORONER_[A-Z0-9_]+)"', (REPO / src).read_text()))
    # Read from the environment directly rather than through a flag.
    names |= set(re.findall(r'"(CORONER_[A-Z0-9_]+)"', (REPO / "services/coroner-agent/src/identity.rs").read_text()))
    names |= {"CORONER_HOOK"}  # python/coroner_hook's switch (docs/HOOK.md)
    return names


def check_consistency(objs, where, known_vars, documented_secrets, whole_deployment):
    problems = []
    pods = list(pod_specs(objs))
    for owner, spec, _ in pods:
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            who = f"{owner['kind']} {owner['metadata']['name']} container {c['name']}"
            port_names = {p.get("name") for p in c.get("ports", [])}
            defined = []
            for e in c.get("env", []):
                for ref in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
                    if ref not in defined:
                        problems.append(f"{who}: env {e['name']} refers to $({ref}), which is not defined before it (Kubernetes leaves it unexpanded)")
                if e["name"].startswith("CORONER_") and e["name"] not in known_vars:
                    problems.append(f"{who}: env {e['name']} is not a variable coroner reads")
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in documented_secrets:
                    problems.append(f"{who}: Secret {ref['name']} is not one docs/KUBERNETES.md tells how to create")
                defined.append(e["name"])
            for arg in c.get("command", []) + c.get("args", []):
                for ref in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
                    if ref not in defined:
                        problems.append(f"{who}: the command refers to $({ref}), which the container's env does not define")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                handler = c.get(probe, {})
                for kind in ("httpGet", "tcpSocket"):
                    port = handler.get(kind, {}).get("port")
                    if isinstance(port, str) and port not in port_names:
                        problems.append(f"{who}: {probe} uses port {port}, which the container does not name")
                grpc = handler.get("grpc")
                if grpc and grpc["port"] not in {p["containerPort"] for p in c.get("ports", [])}:
                    problems.append(f"{who}: {probe} asks gRPC on port {grpc['port']}, which the container does not expose")
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            volumes = {v["name"] for v in spec.get("volumes", [])}
            for m in sorted(mounts - volumes):
                problems.append(f"{who}: mounts volume {m}, which the pod does not have")
        if whole_deployment:
            for v in spec.get("volumes", []):
                claim = v.get("persistentVolumeClaim", {}).get("claimName")
                if claim and not any(o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == claim for o in objs):
                    problems.append(f"{owner['kind']} {owner['metadata']['name']}: claim {claim} is not among the objects")
                secret = v.get("secret", {}).get("secretName")
                if secret and secret not in documented_secrets:
                    problems.append(f"{owner['kind']} {owner['metadata']['name']}: Secret {secret} is not one docs/KUBERNETES.md tells how to create")
    if whole_deployment:
        services = [o for o in objs if o["kind"] == "Service"]
        for s in services:
            selector = s["spec"].get("selector", {})
            matching = [(spec, labels) for _, spec, labels in pods if selector and all(labels.get(k) == v for k, v in selector.items())]
            if not matching:
                problems.append(f"Service {s['metadata']['name']} selects no pod")
            for p in s["spec"].get("ports", []):
                tp = p.get("targetPort")
                if isinstance(tp, str) and not any(tp in {cp.get("name") for c in spec.get("containers", []) for cp in c.get("ports", [])} for spec, _ in matching):
                    problems.append(f"Service {s['metadata']['name']} port {p['name']}: no selected pod has a port named {tp}")
        for o in objs:
            if o["kind"] == "StatefulSet":
                gov = [s for s in services if s["metadata"]["name"] == o["spec"]["serviceName"]]
                if not gov or gov[0]["spec"].get("clusterIP") != "None":
                    problems.append(f"StatefulSet {o['metadata']['name']}: its serviceName {o['spec']['serviceName']} is not a headless Service here")
            if o["kind"] == "ServiceMonitor":
                sel = o["spec"]["selector"].get("matchLabels", {})
                chosen = [s for s in services if all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
                for ep in o["spec"]["endpoints"]:
                    if not chosen or not all(ep["port"] in {p["name"] for p in s["spec"]["ports"]} for s in chosen):
                        problems.append(f"ServiceMonitor {o['metadata']['name']}: endpoint port {ep['port']} is not a port of every Service it selects")
                    secret = ep.get("authorization", {}).get("credentials", {}).get("name")
                    if secret and secret not in documented_secrets:
                        problems.append(f"ServiceMonitor {o['metadata']['name']}: Secret {secret} is not one docs/KUBERNETES.md tells how to create")
            if o["kind"] == "PodDisruptionBudget":
                sel = o["spec"]["selector"]["matchLabels"]
                if not any(all(labels.get(k) == v for k, v in sel.items()) for _, _, labels in pods):
                    problems.append(f"PodDisruptionBudget {o['metadata']['name']} selects no pod")
    if problems:
        raise Failure(f"{where}:\n  " + "\n  ".join(problems))


def documented_secrets():
    doc = (REPO / "docs/KUBERNETES.md").read_text()
    return set(re.findall(r"create secret (?:generic|tls) ([a-z0-9-]+)", doc))


# ---------------------------------------------------------------- self-check


def self_check(crds):
    """Broken objects must be refused: a validator that passes everything fails here."""
    sts = next(o for o in build(HERE / "overlays/sqlite") if o["kind"] == "StatefulSet")
    cases = []
    bad = copy.deepcopy(sts)
    bad["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    cases.append(("a misspelt field in a StatefulSet", lambda: validate_object(bad, crds, "self-check")))
    bad2 = copy.deepcopy(sts)
    bad2["spec"]["replicas"] = "two"
    cases.append(("a string where Kubernetes wants a number", lambda: validate_object(bad2, crds, "self-check")))
    job = load_yaml_docs(HERE / "examples/pytorchjob.yaml")[0]
    bad3 = copy.deepcopy(job)
    bad3["spec"]["nprocPerNodes"] = "2"
    cases.append(("a misspelt field in a PyTorchJob", lambda: validate_object(bad3, crds, "self-check")))
    bad4 = copy.deepcopy(job)
    bad4["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = {"spec": {"containers": [{"name": "x", "image": "y", "comand": ["z"]}]}}
    cases.append(("a misspelt field in a PyTorchJob's pod template", lambda: validate_object(bad4, crds, "self-check")))
    bad5 = copy.deepcopy(sts)
    env = bad5["spec"]["template"]["spec"]["containers"][0]["env"]
    env.insert(0, env.pop(next(i for i, e in enumerate(env) if e["name"] == "CORONER_ADVERTISE_GRPC")))
    cases.append(("$(POD_NAME) used before it is defined", lambda: check_consistency([bad5], "self-check", coroner_variables(), documented_secrets(), False)))
    for what, run in cases:
        try:
            run()
        except Failure:
            continue
        raise Failure(f"self-check: {what} was not refused: the validator is broken")
    return len(cases)


def main():
    crds = load_crd_schemas()
    known_vars = coroner_variables()
    secrets = documented_secrets()
    refused = self_check(crds)
    binary = kustomize_binary()
    checked = 0
    for rel in KUSTOMIZATIONS:
        objs = build(HERE / rel)
        if binary:
            same_render(objs, render_with_binary(binary, HERE / rel), rel)
        for o in objs:
            validate_object(o, crds, rel)
            checked += 1
        check_consistency(objs, rel, known_vars, secrets, whole_deployment=rel != "base")
    for path in EXAMPLES:
        objs = load_yaml_docs(path)
        for o in objs:
            validate_object(o, crds, path.name)
            checked += 1
        check_consistency(objs, path.name, known_vars, secrets, whole_deployment=False)
    how = f"rendered by {' '.join(binary)} and by validate.py, identically" if binary else "rendered by validate.py (no kustomize or kubectl here)"
    print(
        f"deploy/kubernetes: {len(KUSTOMIZATIONS)} kustomizations ({how}) and {len(EXAMPLES)} examples: {checked} objects valid "
        f"(strict) against Kubernetes {' and '.join(kube_versions())} or their CRD schemas; consistency checks hold; "
        f"{refused} broken objects refused"
    )


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"validate.py: {e}", file=sys.stderr)
        sys.exit(1)
