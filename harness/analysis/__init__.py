"""Stored evals turned into conclusions (never a server): the comparison, divergence, routing, cost, plan,
sweep table and CI gate of a run.
"""
