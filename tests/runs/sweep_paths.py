"""The params paths the runs/sweep tests sweep (a module of its own: ``from conftest import``
finds whichever conftest was imported first when several test folders run together)."""

WINDOW_PATH = "extension_params.health_params.windowed.max_cooldown_blocks"
EXPIRY_PATH = "params.validation_params.expiration_blocks"
