"""tokensweep: phase diagrams of token clustering in deep Transformers."""
__version__ = "0.1.0"
