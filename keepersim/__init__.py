"""keepersim: a deterministic simulator of the Gonka inference module's executor-health machinery."""
