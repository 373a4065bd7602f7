"""Analyses: plans of edits and reads, run on the engine (one module each)."""
