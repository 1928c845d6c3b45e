"""torchlint: a static linter and auto-fixer for PyTorch performance anti-patterns."""

__version__ = "0.19.0"
