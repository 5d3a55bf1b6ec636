"""The CDI spec cache as a start reads it (spec dirs, parse cache, qualified names, annotations) and
the edits applied to an OCI config."""
