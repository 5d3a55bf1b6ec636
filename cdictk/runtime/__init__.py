"""Setting up container runtimes and engines on a node to run containers through cdictk."""
