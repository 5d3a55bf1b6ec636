"""The CDI standard, vendor-neutral: model, strict load and dump, validation, spec dirs, apply."""
