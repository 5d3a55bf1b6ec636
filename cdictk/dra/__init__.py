"""The DRA kubelet plugin: the node's GPUs as ResourceSlices, claims prepared as CDI specs."""
