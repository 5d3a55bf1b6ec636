"""`cdictk hook prestart`: the legacy prestart hook that gives a running container its GPUs."""
