"""
Test helpers for code built on acpkit, shipped for users (like ``treq.testing``).

Submodules, imported explicitly:

- ``acpkit.testing.strategies``: Hypothesis strategies for every generated model class.
- ``acpkit.testing.jsonschema``: Hypothesis strategies that generate JSON from the ACP
  JSON schema itself (the subset of JSON Schema the ACP schemas use).
- ``acpkit.testing.modelserver``: a scripted OpenAI-compatible model server on loopback.
"""
