"""What the start path's packages share: errors, fd-based file and rootfs walks, syscalls, OCI state
and config, strict JSON, settings files, trusted paths, ELF and ld.so.cache readers."""
