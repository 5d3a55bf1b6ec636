"""What runs inside runc/crun on every container start. Standard library only."""
