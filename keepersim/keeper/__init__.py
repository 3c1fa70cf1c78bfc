"""State access and rules of the inference module."""
