"""Typed errors of the module. Each names what was wrong, so a caller can act on it."""

from __future__ import annotations


class KeepersimError(Exception):
    """Base of every error the module raises on bad input."""


class KeyCodecError(KeepersimError):
    pass


class InvalidParamsError(KeepersimError):
    """A params field breaks a rule; ``field`` and ``rule`` say which."""

    def __init__(self, field: str, rule: str, value: object) -> None:
        super().__init__(f"invalid params: {field}={value!r} breaks rule: {rule}")
        self.field = field
        self.rule = rule
        self.value = value


class UnauthorizedError(KeepersimError):
    pass


class InvalidMessageError(KeepersimError):
    """A malformed message: a required field is missing or out of range."""


class UnknownParticipantError(KeepersimError):
    pass


class DuplicateInferenceError(KeepersimError):
    pass


class UnknownInferenceError(KeepersimError):
    pass


class InferenceExpiredError(KeepersimError):
    pass


class InferenceStateError(KeepersimError):
    """The message does not fit the inference's current status."""


class NoExecutorsError(KeepersimError):
    """Selection found nobody to serve the request."""


class UnknownModelError(KeepersimError):
    pass


class BlockError(KeepersimError):
    """A block could not be applied; the store stays at the last committed block.

    ``height`` and ``tx_index`` (None when the block's own logic failed) say where.
    """

    def __init__(self, message: str, height: int | None = None, tx_index: int | None = None):
        super().__init__(message)
        self.height = height
        self.tx_index = tx_index


class GenesisError(KeepersimError):
    pass


class ChainJsonError(KeepersimError):
    """Chain JSON that does not fit the message: ``path`` names the field (``""``: the whole
    object), e.g. ``ml_nodes[0].poc_weight``."""

    def __init__(self, where: str, path: str, problem: str) -> None:
        super().__init__(f"{where}: {path + ': ' if path else ''}{problem}")
        self.where = where
        self.path = path
        self.problem = problem
