"""Database backends of ReviewHub's own (Django's, with what it needs added)."""
