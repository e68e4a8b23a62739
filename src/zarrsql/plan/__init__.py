"""Scan planning: predicates on dimensions, kept indices, bounds :=, and work units."""
