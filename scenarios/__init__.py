"""Scenarios: data files that say what to run, and the code that turns them into tensors.

- ``scenarios.loader``: ``load(path)``, ``discover(root, family, size)``, ``get("family/name")``.
- ``scenarios.schema``: ``validate`` (field by field; ``ScenarioError`` names file and field) and
  the data model (``Scenario``, ``Call``, ``Injection``, ...).
- ``scenarios.builders``: ``build_static``, ``build_call`` (deterministic from the seed, injections applied).
- ``scenarios.bundle``: recorded bundles (manifest + safetensors), ``save_bundle``/``load_bundle``.

The format is documented in docs/interfaces.md ("Scenario files").
"""
