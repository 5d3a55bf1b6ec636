"""The kubelet's APIs a DRA plugin serves, as .proto files written by us from the published APIs, and
the code generated from them with typed stubs (``.pyi``) for mypy; ``make proto`` generates it again.

- ``dra_v1.proto`` (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``) and ``dra_v1beta1.proto`` (the same
  service in ``v1beta1``, for 1.32 and 1.33 kubelets, without ``Device.share_id``): prepare and
  unprepare claims, on the plugin's DRA socket.
- ``pluginregistration.proto`` (``pluginregistration.Registration``): what the kubelet's plugin
  watcher asks on the plugin's socket in its registry directory.

The package directory is not named ``proto`` as the device plugin's is: a name says which module it is.
"""
