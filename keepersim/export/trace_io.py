"""The exporter's one import of the trace package (keepersim/trace/ is the only place that writes
traces)."""

from keepersim.trace.format import encode_message as message_to_json
from keepersim.trace.writer import TraceWriter

__all__ = ["TraceWriter", "message_to_json"]
