"""`cdictk runtime configure`: patches for engine config files, one pure function per engine."""
