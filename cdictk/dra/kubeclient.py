"""The API server calls the DRA plugin makes, through the official client, JSON dicts in and out.

Objects go out as the dicts :mod:`cdictk.dra.slices` builds (clients 37 and later check them against
their models first and refuse a field they do not know; 34 sends them as they are) and come back as
the server wrote them (``_preload_content=False``, then JSON), so nothing the server adds is lost to a
model.
``resource.k8s.io/v1`` is spoken, or ``v1beta1`` for a server that lacks v1 (Kubernetes 1.32 and
1.33): the version is chosen when the client is made, or asked of the server
(:meth:`KubeClient.served_version`).

Every failure is a :class:`KubeError`, one line naming the call and what the server said (its status
code and the message of its Status object), or why no answer came.
"""

from __future__ import annotations

import json
import os
from typing import Any

import urllib3
from kubernetes import client, config

from cdictk.dra.slices import API_VERSIONS, GROUP, V1, V1BETA1
from cdictk.startpath.helpers.errors import CdictkError

TIMEOUT = 30.0  # seconds for one call: the plugin's loop retries, a hung server must not stop it


class KubeError(CdictkError):
    """A call that failed; ``status`` is the server's HTTP status where it answered."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__("", "", reason)
        self.status = status


class KubeClient:
    """The calls against one API server, ``api_version`` being the ResourceSlices' and claims'."""

    def __init__(self, api_client: client.ApiClient, api_version: str = V1) -> None:
        if api_version not in API_VERSIONS:
            raise KubeError(f"unknown API version {api_version!r} (one of {', '.join(API_VERSIONS)})")
        self.api_client = api_client
        self.api_version = api_version
        self._core = client.CoreV1Api(api_client)
        resource = client.ResourceV1Api if api_version == V1 else client.ResourceV1beta1Api
        self._resource = resource(api_client)

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, api_version: str = V1) -> KubeClient:
        """A client for the kubeconfig at ``path``; without one, ``$KUBECONFIG`` or ``~/.kube/config``
        where there is such a file, else the pod's service account (in-cluster), as
        ``kubernetes.config.load_config`` chooses (without its note on stdout)."""
        configuration = client.Configuration()
        try:
            if path is None and not _default_kubeconfig():
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=path, client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as error:
            where = path or "the default kubeconfig or the pod's service account"
            raise KubeError(f"Kubernetes client configuration from {where}: {_line(error)}") from None
        return cls(client.ApiClient(configuration), api_version)

    def served_version(self) -> str:
        """The version of resource.k8s.io the server serves that we speak: v1 where it has it, else
        v1beta1; KubeError when it serves neither."""
        group = self._call(f"discovery of {GROUP}", client.ResourceApi(self.api_client).get_api_group)
        served = {version.get("groupVersion") for version in group.get("versions") or []}
        for wanted in API_VERSIONS:
            if wanted in served:
                return wanted
        raise KubeError(
            f"the API server serves neither {V1} nor {V1BETA1} (it has {', '.join(sorted(served)) or 'none'})"
        )

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            f"read ResourceClaim {namespace}/{name}",
            self._resource.read_namespaced_resource_claim,
            name,
            namespace,
        )

    def node_uid(self, node: str) -> str:
        read = self._call(f"read Node {node}", self._core.read_node, node)
        uid = (read.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            raise KubeError(f"read Node {node}: the answer has no metadata.uid")
        return uid

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        listed = self._call(
            f"list ResourceSlices of {driver} on {node}",
            self._resource.list_resource_slice,
            field_selector=f"spec.driver={driver},spec.nodeName={node}",
        )
        items = listed.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def create_slice(self, item: dict[str, Any]) -> dict[str, Any]:
        name = (item.get("metadata") or {}).get("generateName") or (item.get("metadata") or {}).get("name")
        return self._call(f"create ResourceSlice {name}", self._resource.create_resource_slice, item)

    def replace_slice(self, name: str, item: dict[str, Any]) -> dict[str, Any]:
        return self._call(f"replace ResourceSlice {name}", self._resource.replace_resource_slice, name, item)

    def delete_slice(self, name: str) -> None:
        self._call(f"delete ResourceSlice {name}", self._resource.delete_resource_slice, name)

    def close(self) -> None:
        self.api_client.close()

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            response = method(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            answer = json.loads(response.data)
        except client.ApiException as error:
            raise KubeError(f"{what}: {_refusal(error)}", error.status) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise KubeError(f"{what}: {_line(error)}") from None
        if not isinstance(answer, dict):
            raise KubeError(f"{what}: the answer is no JSON object")
        return answer


def _default_kubeconfig() -> bool:
    """Whether a kubeconfig is where the client looks without a path ($KUBECONFIG, else ~/.kube/config)."""
    return bool(os.environ.get("KUBECONFIG")) or os.path.isfile(os.path.expanduser("~/.kube/config"))


def _refusal(error: Any) -> str:
    """An ApiException as one line: the status code and the Status object's message (else the body,
    else the HTTP reason)."""
    message = ""
    try:
        status = json.loads(error.body or "")
        if isinstance(status, dict):
            message = str(status.get("message") or "")
    except ValueError:
        message = str(error.body or "")
    return f"{error.status} {error.reason}: {_line(message or error.reason or 'no message')}"


def _line(error: object) -> str:
    return " ".join(str(error).split())
