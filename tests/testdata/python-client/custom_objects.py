"""The official Kubernetes Python client against a custom resource.

Drives widgets.example.com/v1 (the CRD of tests/tests/crds.rs, already Established) in the
kubeconfig context given as the first argument with CustomObjectsApi: create (the schema's
default filled in), get, list by label, merge patch, status patch, watch from a
resourceVersion, a 422 naming the invalid field, delete, and a 404 after it. Any failed
expectation raises, so the exit status is the verdict.
"""

import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, NAMESPACE, PLURAL = "example.com", "v1", "default", "widgets"


def expect_error(status, field, call, *args):
    try:
        call(*args)
    except ApiException as e:
        assert e.status == status, f"expected {status}, got {e.status}: {e.body}"
        assert field in e.body, f"{field} not named in: {e.body}"
        return
    raise AssertionError(f"expected a {status} error")


def main(context):
    config.load_kube_config(context=context)
    crds = client.ApiextensionsV1Api()
    crd = crds.read_custom_resource_definition("widgets.example.com")
    established = [c for c in crd.status.conditions or [] if c.type == "Established"]
    assert established and established[0].status == "True", crd.status

    api = client.CustomObjectsApi()
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "py", "labels": {"made-by": "python"}},
        "spec": {"image": "nginx:1.27"},
    }
    created = api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
    assert created["spec"]["size"] == 1, created
    since = created["metadata"]["resourceVersion"]

    got = api.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "py")
    assert got["metadata"]["uid"] == created["metadata"]["uid"], got

    listed = api.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, label_selector="made-by=python"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["py"], listed

    patched = api.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, "py", {"spec": {"size": 3}}
    )
    assert patched["spec"] == {"image": "nginx:1.27", "size": 3}, patched

    status = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, NAMESPACE, PLURAL, "py", {"status": {"ready": True}}
    )
    assert status["status"] == {"ready": True}, status
    assert status["spec"]["size"] == 3, status

    seen = []
    stream = watch.Watch().stream(
        api.list_namespaced_custom_object,
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        resource_version=since,
        timeout_seconds=30,
    )
    for event in stream:
        obj = event["object"]
        seen.append((event["type"], obj["spec"].get("size"), "status" in obj))
        if "status" in obj:
            break
    assert seen == [("MODIFIED", 3, False), ("MODIFIED", 3, True)], seen

    bad = dict(body, metadata={"name": "bad"}, spec={"image": "nginx:1.27", "size": "big"})
    expect_error(
        422, "spec.size", api.create_namespaced_custom_object,
        GROUP, VERSION, NAMESPACE, PLURAL, bad,
    )

    api.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "py")
    expect_error(
        404, "py", api.get_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL, "py"
    )
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
