"""cdictk held against the CDI reference library (``tags.cncf.io/container-device-interface`` v1.1.0).

``cases`` makes seeded cases (spec files in spec dirs, an OCI config, the devices to inject),
``regenerate`` runs them through the reference library (a Go driver built for the run) and writes
the corpus to ``tests/data/cdi-reference/``; ``replay`` runs a case through cdictk and names the row of
docs/compatibility.md that explains any difference. CI has no Go: it replays the committed corpus
(tests/unit/cdi/test_reference_corpus.py).
"""
