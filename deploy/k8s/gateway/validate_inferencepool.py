#!/usr/bin/env python3
"""Offline check of deploy/k8s/gateway/inferencepool.yaml (kubernetes-validate knows only the
core kinds, not the Gateway API Inference Extension's CRDs). Checks, without a cluster:

1. apiVersion/kind are the CRD's group/version (inference.networking.k8s.io/v1) and kind.
2. The object validates against the CRD's openAPIV3Schema (inferencepool-v1.schema.json, copied
   from the extension's v1.6.0 release, descriptions and status removed) with jsonschema, every
   object schema closed (additionalProperties: false) as the API server's strict field
   validation rejects unknown fields: types, required fields, enums, patterns, ranges, list
   sizes.
3. The CRD's CEL rules (x-kubernetes-validations), which jsonschema ignores, re-implemented
   here; an unknown rule in the schema fails the check instead of being skipped.
4. The pool selects the pods of deploy/k8s/deployment-{cpu,gpu}.yaml and its target port is
   their containerPort.
5. Self-test: broken copies of the manifest (each of the faults above) are rejected.

Not checked: metadata (ObjectMeta) beyond the name, and anything a controller decides (whether
the EPP Service exists, whether a Gateway accepts the pool). Needs PyYAML and jsonschema
(kubernetes-validate's venv has both). Exit status 0 when every check passes, 77 (skipped)
without those modules.
"""
import copy
import json
import os
import re
import sys

try:
    import jsonschema
    import yaml
except ImportError as e:  # CTest reports exit status 77 as skipped
    print(f"skipped: {e} (pip install jsonschema pyyaml)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
K8S = os.path.dirname(HERE)

# The CEL rules of the v1 schema (cel_errors implements them).
KNOWN_RULES = {
    "self.kind != 'Service' || has(self.port)",
    "self.all(p1, self.exists_one(p2, p1.number==p2.number))",
}


def closed(schema):
    """The schema with every object that lists properties closed to unknown fields (metadata
    lists none: ObjectMeta stays open)."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    return s


def cel_rules(node, found):
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations", []):
            found.add(r["rule"])
        for v in node.values():
            cel_rules(v, found)
    elif isinstance(node, list):
        for v in node:
            cel_rules(v, found)
    return found


def cel_errors(obj):
    errors = []
    spec = obj.get("spec", {})
    ref = spec.get("endpointPickerRef")
    if ref is not None and ref.get("kind", "Service") == "Service" and "port" not in ref:
        errors.append("endpointPickerRef: port is required when kind is 'Service' or unspecified")
    numbers = [p.get("number") for p in spec.get("targetPorts", [])]
    if len(numbers) != len(set(numbers)):
        errors.append("targetPorts: port number must be unique")
    return errors


def errors_of(obj, crd):
    errs = []
    want = crd["group"] + "/" + crd["version"]
    if obj.get("apiVersion") != want or obj.get("kind") != crd["kind"]:
        errs.append(f"apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')}, want "
                    f"{want}/{crd['kind']}")
    validator = jsonschema.Draft7Validator(closed(crd["openAPIV3Schema"]))
    errs += [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
             for e in validator.iter_errors(obj)]
    name = obj.get("metadata", {}).get("name", "")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                        name) or len(name) > 253:
        errs.append(f"metadata.name {name!r} is not a DNS subdomain")
    return errs + cel_errors(obj)


def main():
    crd = json.load(open(os.path.join(HERE, "inferencepool-v1.schema.json")))
    unknown = cel_rules(crd["openAPIV3Schema"], set()) - KNOWN_RULES
    if unknown:
        sys.exit(f"validate_inferencepool: CEL rules not implemented here: {sorted(unknown)}")

    pool = yaml.safe_load(open(os.path.join(HERE, "inferencepool.yaml")))
    errs = errors_of(pool, crd)

    # The pool selects the octet pods and targets their port.
    selector = pool["spec"]["selector"]["matchLabels"]
    for f in ("deployment-cpu.yaml", "deployment-gpu.yaml"):
        dep = yaml.safe_load(open(os.path.join(K8S, f)))
        pod = dep["spec"]["template"]
        labels = pod["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            errs.append(f"selector {selector} does not select the pods of {f} ({labels})")
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        for p in pool["spec"]["targetPorts"]:
            if p["number"] not in ports:
                errs.append(f"targetPort {p['number']} is no containerPort of {f} ({ports})")
    if errs:
        sys.exit("validate_inferencepool: inferencepool.yaml is invalid:\n  " + "\n  ".join(errs))

    # Self-test: each fault must be caught, or the checks above prove nothing.
    def broken(edit):
        o = copy.deepcopy(pool)
        edit(o)
        return o

    faults = {
        "no targetPorts": lambda o: o["spec"].pop("targetPorts"),
        "port 0": lambda o: o["spec"]["targetPorts"][0].update(number=0),
        "duplicate port": lambda o: o["spec"]["targetPorts"].append({"number": 8000}),
        "EPP Service without port": lambda o: o["spec"]["endpointPickerRef"].pop("port"),
        "bad failureMode": lambda o: o["spec"]["endpointPickerRef"].update(failureMode="Open"),
        "unknown field": lambda o: o["spec"].update(extensionRef={"name": "x"}),
        "empty matchLabels": lambda o: o["spec"]["selector"].update(matchLabels={}),
        "v1alpha2": lambda o: o.update(apiVersion="inference.networking.x-k8s.io/v1alpha2"),
        "bad name": lambda o: o["metadata"].update(name="Octet_Pool"),
    }
    missed = [what for what, edit in faults.items() if not errors_of(broken(edit), crd)]
    if missed:
        sys.exit(f"validate_inferencepool: the self-test faults were not caught: {missed}")
    print(f"validate_inferencepool: inferencepool.yaml valid ({crd['group']}/{crd['version']} "
          f"schema, {len(KNOWN_RULES)} CEL rules, selects the CPU and GPU pods); "
          f"{len(faults)} broken copies rejected")


if __name__ == "__main__":
    main()
