"""The exporter's one import of the trace writer (keepersim/trace/ takes it over: change this
line only)."""

from keepersim.sim.trace_writer import TraceWriter, message_to_json

__all__ = ["TraceWriter", "message_to_json"]
