"""An API server stand-in: the few ``resource.k8s.io`` and core calls a DRA kubelet plugin makes, over
plain HTTP on 127.0.0.1, for the official Python client to talk to through a kubeconfig.

What it serves, for one API version of ``resource.k8s.io`` (``v1``, or ``v1beta1`` as Kubernetes 1.32
and 1.33 do), the other answering 404 as a server that lacks it:

- ``GET /apis/resource.k8s.io``: the group's discovery, naming the version served.
- ResourceClaims: ``GET`` of a namespaced claim, which the test stores (:meth:`ApiServer.put_claim`).
- ResourceSlices (cluster-scoped): list with ``fieldSelector`` on ``spec.driver``, ``spec.nodeName``
  and ``metadata.name``; get; create, a ``generateName`` becoming a name; ``PUT``, refused with 409
  when its ``resourceVersion`` is not the stored one and with 422 when it changes an immutable field
  (driver, pool name, node); delete; and delete of a collection by field selector (what the kubelet
  does to its node's slices at its start).
- ``GET /api/v1/nodes/<name>`` of the nodes the test adds (:meth:`ApiServer.add_node`).

Every object it stores is first validated against the official schema of Kubernetes 1.34, strict
(kubernetes-validate): an unknown field, a wrong type or a missing required one is a 422 with a
message shaped like the API server's. With ``device_taints`` false it drops the devices' taints from
the slices it stores, as a server without the DRADeviceTaints feature gate does. With a token set, a request without ``Authorization: Bearer
<token>`` is a 401. Writes are recorded (:attr:`ApiServer.writes`), so a test can tell that nothing was
written, and the next ones can be refused with an answer of the test's (:attr:`ApiServer.refusals`).

What it is not: no watch, no paging, no admission beyond the schema (no CEL validation rules, no
limits the schema does not state, no defaulting), no conversion between API versions, no garbage
collection of owned objects, no RBAC, no TLS.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate

GROUP = "resource.k8s.io"
KUBERNETES = "1.34.0"  # the schemas objects are validated against
SLICE_FIELDS = ("spec.driver", "spec.nodeName", "metadata.name")
IMMUTABLE = (("spec", "driver"), ("spec", "pool", "name"), ("spec", "nodeName"))
_SLICES = re.compile(rf"/apis/{re.escape(GROUP)}/(?P<version>[^/]+)/resourceslices(?:/(?P<name>[^/]+))?")
_CLAIM = re.compile(
    rf"/apis/{re.escape(GROUP)}/(?P<version>[^/]+)/namespaces/(?P<namespace>[^/]+)/resourceclaims/(?P<name>[^/]+)"
)
_NODE = re.compile(r"/api/v1/nodes/(?P<name>[^/]+)")


class Refusal(Exception):
    """An answer other than success: the status code and a Status object's reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Write:
    """One change the server made: the verb (create, update, delete) and the object's name."""

    verb: str
    name: str


class ApiServer:
    def __init__(self, *, version: str = "v1", token: str | None = None, device_taints: bool = True) -> None:
        self.version = version
        self.token = token
        self.device_taints = device_taints
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.refusals: list[Refusal] = []  # what the next writes are answered with, in turn
        self._lock = threading.Lock()
        self._revision = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ the test's side

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="apiserver", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig whose current context is this server (with its token, if it has one)."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
        path.write_text(json.dumps(kubeconfig))  # YAML reads JSON
        return path

    def add_node(self, name: str) -> str:
        """A Node of that name; its UID."""
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        with self._lock:
            self.nodes[name] = self._stored(node, "Node")
        return str(self.nodes[name]["metadata"]["uid"])

    def put_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Store a ResourceClaim (validated as any object); the stored one."""
        metadata = claim.get("metadata") or {}
        with self._lock:
            stored = self._stored(claim, "ResourceClaim")
            self.claims[(str(metadata.get("namespace")), str(metadata.get("name")))] = stored
        return stored

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a stored ResourceClaim (a user's ``kubectl delete``); KeyError if there is none."""
        with self._lock:
            del self.claims[(namespace, name)]

    def wipe(self, node: str) -> None:
        """What a starting kubelet does: delete every slice of its node."""
        with self._lock:
            self._delete_collection({"spec.nodeName": node})

    # ------------------------------------------------------------ the API

    def handle(self, method: str, target: str, body: bytes, authorization: str | None) -> tuple[int, Any]:
        try:
            if self.token is not None and authorization != f"Bearer {self.token}":
                raise Refusal(401, "Unauthorized", "Unauthorized")
            split = urlsplit(target)
            query = {key: values[-1] for key, values in parse_qs(split.query).items()}
            with self._lock:
                if method in {"POST", "PUT", "DELETE"} and self.refusals:
                    raise self.refusals.pop(0)
                return 200, self._route(method, split.path, query, body)
        except Refusal as refusal:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": refusal.message,
                "reason": refusal.reason,
                "code": refusal.code,
            }
            return refusal.code, status

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> Any:
        if path.rstrip("/") == f"/apis/{GROUP}" and method == "GET":
            version = {"groupVersion": f"{GROUP}/{self.version}", "version": self.version}
            return {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": GROUP,
                "versions": [version],
                "preferredVersion": version,
            }
        if found := _NODE.fullmatch(path):
            if method != "GET":
                raise _not_allowed(method)
            return self._get(self.nodes, found["name"], "nodes", "")
        if (found := _CLAIM.fullmatch(path)) and found["version"] == self.version:
            if method != "GET":
                raise _not_allowed(method)
            key = (found["namespace"], found["name"])
            return self._get(self.claims, key, "resourceclaims", GROUP)
        if (found := _SLICES.fullmatch(path)) and found["version"] == self.version:
            name = found["name"]
            if name is None:
                if method == "GET":
                    return self._list(_selector(query.get("fieldSelector", "")))
                if method == "POST":
                    return self._create(_decoded(body))
                if method == "DELETE":
                    return self._delete_collection(_selector(query.get("fieldSelector", "")))
            else:
                if method == "GET":
                    return self._get(self.slices, name, "resourceslices", GROUP)
                if method == "PUT":
                    return self._replace(name, _decoded(body))
                if method == "DELETE":
                    return self._delete(name)
            raise _not_allowed(method)
        raise Refusal(404, "NotFound", "the server could not find the requested resource")

    def _get(self, store: dict[Any, dict[str, Any]], key: Any, resource: str, group: str) -> dict[str, Any]:
        if key not in store:
            name = key[1] if isinstance(key, tuple) else key
            raise _not_found(resource, group, name)
        return store[key]

    def _list(self, selector: dict[str, str]) -> dict[str, Any]:
        items = [item for _, item in sorted(self.slices.items()) if _matches(item, selector)]
        return {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "ResourceSliceList",
            "metadata": {"resourceVersion": str(self._last_revision())},
            "items": [{k: v for k, v in item.items() if k not in {"apiVersion", "kind"}} for item in items],
        }

    def _create(self, item: dict[str, Any]) -> dict[str, Any]:
        metadata = item.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise _invalid(item, "metadata: must be an object")
        if "resourceVersion" in metadata:
            raise _invalid(item, "metadata.resourceVersion: Invalid value: must not be set on create")
        if not metadata.get("name"):
            prefix = metadata.pop("generateName", None)
            if not prefix:
                raise _invalid(item, "metadata.name: Required value: name or generateName is required")
            metadata["name"] = prefix + uuid.uuid4().hex[:5]
        name = str(metadata["name"])
        if name in self.slices:
            raise Refusal(409, "AlreadyExists", f'resourceslices.{GROUP} "{name}" already exists')
        stored = self._stored(item, "ResourceSlice")
        self.slices[name] = stored
        self.writes.append(Write("create", name))
        return stored

    def _replace(self, name: str, item: dict[str, Any]) -> dict[str, Any]:
        metadata = item.get("metadata")
        if not isinstance(metadata, dict) or metadata.get("name") != name:
            raise Refusal(
                400, "BadRequest", f"the name of the object does not match the name on the URL ({name})"
            )
        old = self._get(self.slices, name, "resourceslices", GROUP)
        version = metadata.get("resourceVersion")
        if version is not None and version != old["metadata"]["resourceVersion"]:
            raise Refusal(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on resourceslices.{GROUP} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        for keys in IMMUTABLE:
            if _dig(item, keys) != _dig(old, keys):
                raise _invalid(item, f"{'.'.join(keys)}: Invalid value: field is immutable")
        for kept in ("uid", "creationTimestamp"):
            metadata[kept] = old["metadata"][kept]
        stored = self._stored(item, "ResourceSlice")
        self.slices[name] = stored
        self.writes.append(Write("update", name))
        return stored

    def _delete(self, name: str) -> dict[str, Any]:
        deleted = self._get(self.slices, name, "resourceslices", GROUP)
        del self.slices[name]
        self.writes.append(Write("delete", name))
        return deleted

    def _delete_collection(self, selector: dict[str, str]) -> dict[str, Any]:
        listed = self._list(selector)
        for item in listed["items"]:
            self._delete(item["metadata"]["name"])
        return listed

    def _stored(self, item: dict[str, Any], kind: str) -> dict[str, Any]:
        """``item`` as the server keeps it (UID, resource version, creation time), after the schema's
        check; a 422 naming the first field it fails on."""
        expected = "v1" if kind == "Node" else f"{GROUP}/{self.version}"
        if item.get("apiVersion") != expected or item.get("kind") != kind:
            raise Refusal(
                400,
                "BadRequest",
                f"the object is of {item.get('apiVersion')}, {item.get('kind')}, not {expected}, {kind}",
            )
        metadata = item.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        metadata["resourceVersion"] = str(next(self._revision))
        if kind == "ResourceSlice" and not self.device_taints:
            for device in (item.get("spec") or {}).get("devices") or []:
                (device.get("basic") or device).pop("taints", None)
        try:
            kubernetes_validate.validate(item, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path) or "<object>"
            raise _invalid(item, f"{where}: Invalid value: {error.message}") from None
        return item

    def _last_revision(self) -> int:
        versions = [int(item["metadata"]["resourceVersion"]) for item in self.slices.values()]
        return max(versions, default=0)


def _handler(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            code, answer = server.handle(self.command, self.path, body, self.headers.get("Authorization"))
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a test's output is not the place for an access log

    return Handler


@contextlib.contextmanager
def running(
    *, version: str = "v1", token: str | None = None, device_taints: bool = True
) -> Iterator[ApiServer]:
    server = ApiServer(version=version, token=token, device_taints=device_taints)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _decoded(body: bytes) -> dict[str, Any]:
    try:
        item = json.loads(body)
    except ValueError as error:
        raise Refusal(400, "BadRequest", f"the body is no JSON: {error}") from None
    if not isinstance(item, dict):
        raise Refusal(400, "BadRequest", "the body is no JSON object")
    return item


def _selector(text: str) -> dict[str, str]:
    selector = {}
    for term in filter(None, text.split(",")):
        field, equals, value = term.replace("==", "=").partition("=")
        if not equals or field not in SLICE_FIELDS:
            raise Refusal(
                400, "BadRequest", f'"{field}" is not a known field selector: only {", ".join(SLICE_FIELDS)}'
            )
        selector[field] = value
    return selector


def _matches(item: dict[str, Any], selector: dict[str, str]) -> bool:
    return all(str(_dig(item, tuple(field.split(".")))) == value for field, value in selector.items())


def _dig(item: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        item = item.get(key) if isinstance(item, dict) else None
    return item


def _not_found(resource: str, group: str, name: str) -> Refusal:
    qualified = f"{resource}.{group}" if group else resource
    return Refusal(404, "NotFound", f'{qualified} "{name}" not found')


def _not_allowed(method: str) -> Refusal:
    return Refusal(405, "MethodNotAllowed", f"the server does not allow this method ({method}) here")


def _invalid(item: dict[str, Any], detail: str) -> Refusal:
    kind = item.get("kind", "ResourceSlice")
    kind = kind if kind == "Node" else f"{kind}.{GROUP}"
    name = _dig(item, ("metadata", "name")) or _dig(item, ("metadata", "generateName")) or ""
    return Refusal(422, "Invalid", f'{kind} "{name}" is invalid: {detail}')
