"""What abh stores and how: :mod:`~harness.results.schema` is the registry of every stored kind, its
version, its typed model and its one loader and writer; each other module is one store, reader or writer."""
