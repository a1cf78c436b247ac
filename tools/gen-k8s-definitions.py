#!/usr/bin/env python3
"""Regenerate apiserver/openapi/k8s-definitions.json.

The Kubernetes API schema (Apache-2.0, from the Kubernetes project) ships in the
PyPI package `kubernetes-validate` as JSON Schema. This script keeps the
definitions reachable from the kinds Meridian serves (federation-apiserver and
cluster-sim) and rewrites them into OpenAPI v2 form: `#/definitions/` references
and single (non-nullable) types. Descriptions and the `x-kubernetes-*`
extensions (patch merge keys and strategies, list types, group-version-kinds)
are kept: kubectl's explain, apply and validation read them.

    python3 -m venv /tmp/kv && /tmp/kv/bin/pip install kubernetes-validate==1.37.0
    /tmp/kv/bin/python tools/gen-k8s-definitions.py
"""
import json
import os
import sys

import kubernetes_validate

VERSION = "v1.34.0-local"
ROOTS = [
    "io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Service", "io.k8s.api.core.v1.Endpoints", "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.ServiceAccount", "io.k8s.api.core.v1.Event",
    "io.k8s.api.discovery.v1.EndpointSlice", "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.ReplicaSet", "io.k8s.api.rbac.v1.Role", "io.k8s.api.rbac.v1.ClusterRole",
    "io.k8s.api.rbac.v1.RoleBinding", "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.core.v1.PersistentVolumeClaim", "io.k8s.api.core.v1.ResourceQuota",
    "io.k8s.api.core.v1.LimitRange", "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.apps.v1.DaemonSet", "io.k8s.api.apps.v1.ControllerRevision",
    "io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.networking.v1.Ingress", "io.k8s.api.networking.v1.IngressClass",
    "io.k8s.api.networking.v1.NetworkPolicy", "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
    "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler", "io.k8s.api.events.v1.Event",
    "io.k8s.api.scheduling.v1.PriorityClass", "io.k8s.api.storage.v1.StorageClass",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions",
]


def convert(node):
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            # JSONSchemaProps has a property named `$ref`: only a string is a reference.
            if k == "$ref" and isinstance(v, str):
                out[k] = v.replace("#/$defs/", "#/definitions/")
            elif k == "type" and isinstance(v, list):
                types = [t for t in v if t != "null"]
                out[k] = types[0] if len(types) == 1 else types
            elif k == "properties" and isinstance(v, dict):
                props = convert(v)
                # kubernetes-validate pins apiVersion/kind to one value per
                # file; the real schema leaves them free strings.
                for field in ("apiVersion", "kind"):
                    if isinstance(props.get(field), dict):
                        props[field].pop("enum", None)
                out[k] = props
            else:
                out[k] = convert(v)
        return out
    if isinstance(node, list):
        return [convert(v) for v in node]
    return node


def refs(node, acc):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str):
            acc.add(r.split("/")[-1])
        for v in node.values():
            refs(v, acc)
    elif isinstance(node, list):
        for v in node:
            refs(v, acc)


def main():
    base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema", VERSION)
    defs = json.load(open(os.path.join(base, "_definitions.json")))["$defs"]
    roots = ROOTS + [r + "List" for r in ROOTS if r.startswith(("io.k8s.api.", "io.k8s.apiextensions"))]
    keep, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in defs:
            sys.exit(f"missing definition {name}")
        keep.add(name)
        acc = set()
        refs(defs[name], acc)
        todo.extend(acc - keep)
    out = {name: convert(defs[name]) for name in sorted(keep)}
    # The upstream OpenAPI v2 spells these two as strings with a format;
    # JSON Schema's oneOf form is not understood by kubectl's v2 readers.
    out["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {
        "description": "IntOrString is a type that can hold an int32 or a string.",
        "format": "int-or-string",
        "type": "string",
    }
    out["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "description": "Quantity is a fixed-point representation of a number, such as `500m` or `4Gi`.",
        "type": "string",
    }
    dest = os.path.join(os.path.dirname(__file__), "..", "apiserver", "openapi", "k8s-definitions.json")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"{len(out)} definitions -> {dest}")


if __name__ == "__main__":
    main()
