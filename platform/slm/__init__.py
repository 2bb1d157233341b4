"""slm-platform: small specialized language models under explicit budgets, on Ray."""

__version__ = "0.1.0"
