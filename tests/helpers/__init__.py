"""Builders shared by several test modules (tests never import one another)."""
