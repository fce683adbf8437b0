"""Tests of the models and their codec (acpkit/schema, acpkit/codec)."""
