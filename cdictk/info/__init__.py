"""``cdictk info``: what a node has, and what would make its GPU containers fail."""
