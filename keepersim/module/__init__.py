"""Block lifecycle of the inference module: begin block, messages, end block, epochs, genesis."""
