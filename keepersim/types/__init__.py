"""Keys, params, errors, events and the generated protobuf messages of the inference module."""
