"""``cdictk node-labels``: the labels NVIDIA's GPU feature discovery puts on a GPU node, written as a
Node Feature Discovery local feature file and kept current as the node changes (docs/kubernetes.md)."""
