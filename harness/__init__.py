"""abh: an A/B accuracy harness for LLM inference-server changes."""

__version__ = "0.1.0"
